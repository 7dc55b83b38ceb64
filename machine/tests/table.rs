//! The table of every (state, event) pair, pinned by insta and rendered into the docs.

use interlock_machine::table::{render_markdown, render_text};

#[test]
fn the_full_table_is_pinned() {
    insta::assert_snapshot!("state_event_table", render_text());
}

/// `docs/state-machine.md` is generated; this fails when it is stale. `UPDATE_DOCS=1` rewrites it.
#[test]
fn the_docs_table_is_fresh() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/state-machine.md");
    let wanted = render_markdown();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, &wanted).expect("writing docs/state-machine.md");
    }
    let found = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        found == wanted,
        "docs/state-machine.md is stale: run `UPDATE_DOCS=1 cargo test -p interlock-machine --test table`"
    );
}
