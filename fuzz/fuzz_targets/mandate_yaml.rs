//! Arbitrary bytes into the mandate parser and validator: a mandate or a refusal, never a panic,
//! and (by the parser's input budgets) never unbounded memory from anchors and aliases. A
//! mandate that parses has a hash, and parsing its own canonical JSON as YAML gives it back.
#![no_main]

use interlock_spec::mandate::Mandate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mandate) = Mandate::parse_yaml(text) else {
        return;
    };
    let hash = mandate
        .hash()
        .expect("a valid mandate has a canonical form");
    // JSON is YAML: the canonical form of a valid mandate is itself a valid mandate.
    let json = serde_json::to_string(&mandate).expect("a mandate serializes");
    let again = Mandate::parse_yaml(&json).expect("a mandate's own JSON parses");
    assert_eq!(
        again.hash().expect("hash"),
        hash,
        "the hash survives a round trip"
    );
});
