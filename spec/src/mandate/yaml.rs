//! Strict, bounded YAML reading of a mandate.
//!
//! A mandate is short and written by a human, so the budgets below are a few times what a large
//! real mandate needs and orders of magnitude under serde-saphyr's general-purpose defaults. They
//! stop hostile documents (alias bombs, deep nesting, huge scalars) before they cost memory.

use super::{Mandate, MandateError};
use serde_saphyr::options::{DuplicateKeyPolicy, MergeKeyPolicy};

/// Largest mandate text we read. The example mandate is about 3 KiB.
pub const MANDATE_YAML_BYTES_MAX: usize = 256 * 1024;
/// Deepest nesting of mappings and sequences; the mandate's own structure is 6 deep.
pub const MANDATE_YAML_DEPTH_MAX: usize = 16;
/// Most YAML nodes (scalars, mappings, sequences), counting alias expansions.
pub const MANDATE_YAML_NODES_MAX: usize = 20_000;
/// Most parser events.
pub const MANDATE_YAML_EVENTS_MAX: usize = 50_000;
/// Most alias uses (`*name`). Aliases are allowed for repeated lists such as currencies.
pub const MANDATE_YAML_ALIASES_MAX: usize = 64;
/// Most anchor definitions (`&name`).
pub const MANDATE_YAML_ANCHORS_MAX: usize = 64;
/// Most events replayed by alias expansion in the whole document; this is what defeats an alias
/// bomb, whose cost is in expansion rather than in text.
pub const MANDATE_YAML_REPLAYED_EVENTS_MAX: usize = 4_096;
/// Most bytes of scalar text in the whole document.
pub const MANDATE_YAML_SCALAR_BYTES_MAX: usize = 128 * 1024;
/// Depth of nested alias replay (an alias inside an anchored value, and so on).
const MANDATE_YAML_REPLAY_DEPTH_MAX: usize = 8;

/// The strict, bounded options every YAML file Interlock reads is parsed with (a mandate, a
/// rail profile): both are short, human-written and the same size class.
pub fn options() -> serde_saphyr::Options {
    // Every option we rely on is spelled out, defaults included, so a change of default in a
    // later serde-saphyr cannot loosen the parse.
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(MANDATE_YAML_BYTES_MAX),
            max_depth: MANDATE_YAML_DEPTH_MAX,
            max_nodes: MANDATE_YAML_NODES_MAX,
            max_events: MANDATE_YAML_EVENTS_MAX,
            max_aliases: MANDATE_YAML_ALIASES_MAX,
            max_anchors: MANDATE_YAML_ANCHORS_MAX,
            max_total_scalar_bytes: MANDATE_YAML_SCALAR_BYTES_MAX,
            max_documents: 1,
            max_merge_keys: 0,
            max_inclusion_depth: 0,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MANDATE_YAML_REPLAYED_EVENTS_MAX,
            max_replay_stack_depth: MANDATE_YAML_REPLAY_DEPTH_MAX,
        },
        duplicate_keys: DuplicateKeyPolicy::Error,
        // `<<` would let one grant silently inherit another's limits; a mandate says each
        // limit where it applies.
        merge_keys: MergeKeyPolicy::Error,
        // YAML 1.1 reads `no`, `on` and `off` as booleans; only true/false are booleans here.
        strict_booleans: true,
        legacy_octal_numbers: false,
        // An unquoted scalar that looks like a number or boolean is refused where a string is
        // expected (`mandate_id: 123`), instead of being quietly turned into text.
        no_schema: true,
        reject_unsupported_tags: true,
        reject_tagged_field_names: true,
    }
}

/// Parses `text` into a mandate without validating it.
pub(super) fn parse(text: &str) -> Result<Mandate, MandateError> {
    // The reader budget does not apply to in-memory strings, so the size is checked here.
    if text.len() > MANDATE_YAML_BYTES_MAX {
        return Err(MandateError::TooLarge { bytes: text.len() });
    }
    serde_saphyr::from_str_with_options(text, options())
        .map_err(|error| MandateError::Yaml(error.to_string()))
}
