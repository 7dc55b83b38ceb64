use super::*;
use crate::hash::is_sha256_hex;

const EXAMPLE: &str = include_str!("../../../examples/mandate.yaml");

fn example() -> Mandate {
    Mandate::parse_yaml(EXAMPLE).unwrap()
}

fn tool(name: &str) -> ToolName {
    ToolName::parse(name).unwrap()
}

fn minor(amount: u64) -> Minor {
    Minor::new(amount).unwrap()
}

/// The example with `old` (which must occur exactly once) replaced by `new`.
fn edited(old: &str, new: &str) -> String {
    assert_eq!(EXAMPLE.matches(old).count(), 1, "{old:?} is not unique");
    EXAMPLE.replace(old, new)
}

/// The YAML error for `text`, which must not parse.
fn yaml_error(text: &str) -> String {
    match Mandate::parse_yaml(text) {
        Err(MandateError::Yaml(message)) => message,
        other => panic!("expected a YAML error, got {other:?}"),
    }
}

/// The violations of a mandate changed by `change`, which must make it invalid.
fn violations(change: impl FnOnce(&mut Mandate)) -> Vec<Violation> {
    let mut mandate = example();
    change(&mut mandate);
    mandate.validate().unwrap_err()
}

/// Asserts the only violation of `change` is `problem` at `path`.
fn assert_violation(change: impl FnOnce(&mut Mandate), path: &str, problem: Problem) {
    let path = path.to_owned();
    assert_eq!(violations(change), vec![Violation { path, problem }]);
}

fn refund_grant(mandate: &mut Mandate) -> &mut Grant {
    mandate
        .scope
        .grants
        .get_mut(&tool("create_refund"))
        .unwrap()
}

fn provenance(mandate: &mut Mandate) -> &mut Provenance {
    mandate.provenance.as_mut().unwrap()
}

#[test]
fn the_example_parses_and_validates() {
    let mandate = example();
    assert_eq!(mandate.v, 1);
    assert_eq!(mandate.mandate_id.as_str(), "mnd_support_tier1");
    assert_eq!(mandate.merchant_id.as_str(), "acc_DEMO000001");
    assert_eq!(mandate.agent_id.as_str(), "agent_support_bot");
    assert_eq!(
        (mandate.issued_at, mandate.expires_at),
        (1_700_000_000_000, 2_000_000_000_000)
    );
    let refund = mandate.grant(&tool("create_refund")).unwrap();
    assert_eq!(refund.reversibility, Reversibility::Irreversible);
    assert_eq!(refund.value.max_amount_minor, minor(500_000));
    assert_eq!(refund.value.min_amount_minor, minor(100));
    assert_eq!(refund.value.currencies, vec![Currency::INR]);
    assert_eq!(refund.max_refunds_per_payment, Some(2));
    let window = &mandate.limits.windows[0];
    assert_eq!((window.window_ms, window.max_calls), (86_400_000, 40));
    assert_eq!(window.max_amount_minor, minor(2_000_000));
    assert_eq!(
        mandate.limits.fee_budgets[&Currency::INR].max_fee_minor,
        minor(20_000)
    );
    let rule = &mandate.idempotency[&tool("create_refund")];
    assert_eq!(
        (rule.key_fields.as_slice(), rule.window_ms),
        (&["payment_id".to_owned()][..], None)
    );
    let pins = mandate.provenance.as_ref().unwrap();
    assert_eq!(
        pins.pinned_manifests[&tool("create_refund")].trust_tier,
        TrustTier::Pinned
    );
    assert!(mandate.grant(&tool("create_payout")).is_none());
}

#[test]
fn on_unresolvable_defaults_by_reversibility() {
    let mut mandate = example();
    let read = mandate.grant(&tool("fetch_payment")).unwrap();
    assert_eq!(
        (read.on_unresolvable, read.on_unresolvable()),
        (None, OnUnresolvable::Hold)
    );
    let refund = refund_grant(&mut mandate);
    assert_eq!(refund.on_unresolvable(), OnUnresolvable::Block);
    refund.on_unresolvable = None;
    assert_eq!(refund.on_unresolvable(), OnUnresolvable::Block);
    refund.on_unresolvable = Some(OnUnresolvable::Hold);
    assert_eq!(refund.on_unresolvable(), OnUnresolvable::Hold);
}

#[test]
fn the_readme_shape_without_optional_fields_parses() {
    let text = edited("      on_unresolvable: block\n", "")
        .replace("      max_refunds_per_payment: 2\n", "");
    let mandate = Mandate::parse_yaml(&text).unwrap();
    let refund = mandate.grant(&tool("create_refund")).unwrap();
    assert_eq!(
        (refund.on_unresolvable, refund.max_refunds_per_payment),
        (None, None)
    );
    let bare = text.split("\nidempotency:").next().unwrap();
    let mandate = Mandate::parse_yaml(bare).unwrap();
    assert!(mandate.idempotency.is_empty() && mandate.provenance.is_none());
}

/// The hash input and the hash of the example, pinned: a change here changes the `mandate_hash`
/// every decision records, so it must be deliberate.
#[test]
fn the_example_hash_is_pinned() {
    let mandate = example();
    let value = serde_json::to_value(&mandate).unwrap();
    let canonical = canonical_json(&value).unwrap();
    let hash = mandate.hash().unwrap();
    assert!(is_sha256_hex(&hash));
    assert_eq!(hash, sha256_hex(canonical.as_bytes()));
    insta::assert_snapshot!(format!("{canonical}\n{hash}"));
}

#[test]
fn the_hash_ignores_comments_and_layout_but_not_meaning() {
    let bare: String = EXAMPLE
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .map(|line| line.split(" # ").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let reflowed = bare.replace("currencies: [INR]", "currencies:\n          - INR");
    let quiet = Mandate::parse_yaml(&reflowed).unwrap();
    assert_eq!(quiet.hash(), example().hash());
    let mut changed = example();
    changed.limits.windows[0].max_calls = 41;
    assert_ne!(changed.hash(), example().hash());
}

#[test]
fn check_active_takes_the_time_as_an_argument() {
    let mandate = example();
    assert_eq!(
        mandate.check_active(1_699_999_999_999),
        Err(MandateTimeError::NotYetValid {
            now_ms: 1_699_999_999_999,
            issued_at: 1_700_000_000_000
        })
    );
    assert_eq!(mandate.check_active(1_700_000_000_000), Ok(()));
    assert_eq!(mandate.check_active(1_999_999_999_999), Ok(()));
    assert_eq!(
        mandate.check_active(2_000_000_000_000),
        Err(MandateTimeError::Expired {
            now_ms: 2_000_000_000_000,
            expires_at: 2_000_000_000_000
        })
    );
}

#[test]
fn idempotency_windows_become_sik_buckets() {
    let mut rule = example().idempotency[&tool("create_refund")].clone();
    assert_eq!(rule.window_bucket(1_700_000_000_000), Ok(None));
    rule.window_ms = Some(86_400_000);
    assert_eq!(rule.window_bucket(1_700_000_000_000), Ok(Some(19_675)));
    rule.window_ms = Some(0);
    assert_eq!(rule.window_bucket(1), Err(SikError::ZeroWindow));
}

#[test]
fn header_violations_name_their_field() {
    assert_violation(|m| m.v = 2, "v", Problem::UnsupportedVersion(2));
    assert_violation(
        |m| m.expires_at = m.issued_at,
        "expires_at",
        Problem::ExpiresNotAfterIssued {
            issued_at: 1_700_000_000_000,
            expires_at: 1_700_000_000_000,
        },
    );
    assert_violation(
        |m| m.expires_at = TIME_MS_MAX + 1,
        "expires_at",
        Problem::TimeTooLarge(TIME_MS_MAX + 1),
    );
    assert_violation(|m| m.purpose = "  ".to_owned(), "purpose", Problem::Blank);
    assert_violation(
        |m| m.purpose = "x".repeat(PURPOSE_LENGTH_MAX + 1),
        "purpose",
        Problem::TooLong {
            length: PURPOSE_LENGTH_MAX + 1,
            max: PURPOSE_LENGTH_MAX,
        },
    );
}

#[test]
fn grant_violations_name_their_field() {
    let found = violations(|m| refund_grant(m).value.max_amount_minor = minor(50));
    assert_eq!(
        found[0].to_string(),
        "scope.grants.create_refund.value.max_amount_minor: must be ≥ min_amount_minor (100), got 50"
    );
    assert_violation(
        |m| refund_grant(m).value.currencies.clear(),
        "scope.grants.create_refund.value.currencies",
        Problem::Empty,
    );
    assert_violation(
        |m| refund_grant(m).value.currencies.push(Currency::INR),
        "scope.grants.create_refund.value.currencies",
        Problem::Duplicate("INR".to_owned()),
    );
    assert_violation(
        |m| refund_grant(m).max_refunds_per_payment = Some(0),
        "scope.grants.create_refund.max_refunds_per_payment",
        Problem::ZeroCount,
    );
    let found = violations(|m| m.scope.grants.clear());
    assert_eq!(found[0].path, "scope.grants");
    assert_eq!(found[0].problem, Problem::Empty);
}

#[test]
fn limit_violations_name_their_field() {
    assert_violation(
        |m| m.limits.windows[0].window_ms = 0,
        "limits.windows[0].window_ms",
        Problem::Zero,
    );
    assert_violation(
        |m| m.limits.windows[0].max_calls = 0,
        "limits.windows[0].max_calls",
        Problem::ZeroCount,
    );
    let usd = Currency::parse("USD").unwrap();
    assert_violation(
        |m| m.limits.windows[0].currency = usd,
        "limits.windows[0].currency",
        Problem::UngrantedCurrency(usd),
    );
    assert_violation(
        |m| {
            m.limits
                .fee_budgets
                .get_mut(&Currency::INR)
                .unwrap()
                .window_ms = TIME_MS_MAX + 1
        },
        "limits.fee_budgets.INR.window_ms",
        Problem::TimeTooLarge(TIME_MS_MAX + 1),
    );
    assert_violation(
        |m| {
            let budget = m.limits.fee_budgets[&Currency::INR].clone();
            m.limits.fee_budgets.insert(usd, budget);
        },
        "limits.fee_budgets.USD",
        Problem::UngrantedCurrency(usd),
    );
    assert_violation(
        |m| m.limits.windows = vec![m.limits.windows[0].clone(); WINDOWS_MAX + 1],
        "limits.windows",
        Problem::TooMany {
            count: WINDOWS_MAX + 1,
            max: WINDOWS_MAX,
        },
    );
}

#[test]
fn a_window_scoped_to_tools_counts_only_them() {
    let text = edited(
        "      currency: INR\n",
        "      currency: INR\n      tools: [create_refund]\n",
    );
    let mandate = Mandate::parse_yaml(&text).unwrap();
    let window = &mandate.limits.windows[0];
    assert_eq!(window.tools, Some(vec![tool("create_refund")]));
    assert!(window.counts(&tool("create_refund")));
    assert!(!window.counts(&tool("create_instant_settlement")));
    // Unscoped, a window counts every tool, and the optional field leaves the hash alone.
    let unscoped = &example().limits.windows[0];
    assert!(unscoped.counts(&tool("create_instant_settlement")));
    assert_ne!(mandate.hash(), example().hash());
    let json = serde_json::to_value(example()).unwrap();
    assert!(json["limits"]["windows"][0].get("tools").is_none());
}

#[test]
fn window_scope_violations_name_their_field() {
    let scoped = |tools: &[&str]| {
        let tools: Vec<ToolName> = tools.iter().map(|name| tool(name)).collect();
        move |m: &mut Mandate| m.limits.windows[0].tools = Some(tools)
    };
    assert_violation(scoped(&[]), "limits.windows[0].tools", Problem::Empty);
    assert_violation(
        scoped(&["create_payout"]),
        "limits.windows[0].tools",
        Problem::UngrantedTool(tool("create_payout")),
    );
    assert_violation(
        scoped(&["create_refund", "create_refund"]),
        "limits.windows[0].tools",
        Problem::Duplicate("create_refund".to_owned()),
    );
    let text = edited(
        "      currency: INR\n",
        "      currency: INR\n      tools: create_refund\n",
    );
    assert!(yaml_error(&text).contains("tools"), "{}", yaml_error(&text));
}

#[test]
fn idempotency_violations_name_their_field() {
    let rule = |m: &mut Mandate| {
        m.idempotency
            .get_mut(&tool("create_refund"))
            .unwrap()
            .clone()
    };
    assert_violation(
        |m| {
            let copy = rule(m);
            m.idempotency.insert(tool("create_payout"), copy);
        },
        "idempotency.create_payout",
        Problem::UngrantedTool(tool("create_payout")),
    );
    let set_fields = |fields: &[&str]| {
        let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        move |m: &mut Mandate| {
            m.idempotency
                .get_mut(&tool("create_refund"))
                .unwrap()
                .key_fields = fields;
        }
    };
    let path = "idempotency.create_refund.key_fields";
    assert_violation(set_fields(&[]), path, Problem::Empty);
    assert_violation(
        set_fields(&["payment id"]),
        path,
        Problem::BadKeyField("payment id".into()),
    );
    assert_violation(
        set_fields(&["payment_id", "payment_id"]),
        path,
        Problem::Duplicate("payment_id".into()),
    );
    assert_violation(
        |m| {
            let mut windowed = rule(m);
            windowed.window_ms = Some(0);
            m.idempotency.insert(tool("fetch_payment"), windowed);
        },
        "idempotency.fetch_payment.window_ms",
        Problem::Zero,
    );
}

#[test]
fn provenance_violations_name_their_field() {
    assert_violation(
        |m| provenance(m).server_id = String::new(),
        "provenance.server_id",
        Problem::Blank,
    );
    let upper = "3721A7F7B443E157669CCC9ED27CCAF4DAA2D67DC8367BC1481E2E2B8C4D6C6C";
    assert_violation(
        |m| provenance(m).manifest_sha256 = upper.to_owned(),
        "provenance.manifest_sha256",
        Problem::NotSha256Hex(upper.to_owned()),
    );
    assert_violation(
        |m| {
            let pins = &mut provenance(m).pinned_manifests;
            pins.get_mut(&tool("create_refund")).unwrap().sha256 = "52d4".to_owned();
        },
        "provenance.pinned_manifests.create_refund.sha256",
        Problem::NotSha256Hex("52d4".to_owned()),
    );
    assert_violation(
        |m| {
            let pins = &mut provenance(m).pinned_manifests;
            let pin = pins[&tool("create_refund")].clone();
            pins.insert(tool("create_payout"), pin);
        },
        "provenance.pinned_manifests.create_payout",
        Problem::UngrantedTool(tool("create_payout")),
    );
}

#[test]
fn every_violation_is_reported_at_once() {
    let found = violations(|m| {
        m.v = 3;
        m.limits.windows[0].window_ms = 0;
        provenance(m).manifest_sha256 = "nope".to_owned();
    });
    let paths: Vec<&str> = found.iter().map(|v| v.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "v",
            "limits.windows[0].window_ms",
            "provenance.manifest_sha256"
        ]
    );
    let text = edited("v: 1\n", "v: 3\n").replace("max_calls: 40", "max_calls: 0");
    let error = Mandate::parse_yaml(&text).unwrap_err();
    assert_eq!(
        error.to_string(),
        "mandate is invalid: v: must be 1, got 3; limits.windows[0].max_calls: must be at least 1 \
         (to allow nothing, remove the grant)"
    );
}

#[test]
fn unknown_fields_are_refused_everywhere() {
    for (old, new, field) in [
        ("v: 1\n", "v: 1\nadmin: true\n", "admin"),
        (
            "      reversibility: irreversible",
            "      reversible: yes\n      reversibility: irreversible",
            "reversible",
        ),
        (
            "        min_amount_minor: 100",
            "        min_amount_minor: 100\n        max_amount: 1",
            "max_amount",
        ),
        (
            "      max_calls: 40",
            "      max_calls: 40\n      max_callz: 1",
            "max_callz",
        ),
        (
            "      trust_tier: \"pinned\"",
            "      trust_tier: \"pinned\"\n      note: x",
            "note",
        ),
        ("scope:\n", "scope:\n  revoked: []\n", "revoked"),
    ] {
        let message = yaml_error(&edited(old, new));
        assert!(
            message.contains(&format!("unknown field `{field}`")),
            "{message}"
        );
    }
}

#[test]
fn floats_are_refused_for_money_time_and_counts() {
    for (old, new) in [
        ("max_amount_minor: 500000", "max_amount_minor: 1.5"),
        ("max_amount_minor: 500000", "max_amount_minor: 500000.0"),
        ("min_amount_minor: 100", "min_amount_minor: 1e2"),
        ("max_fee_minor: 20000", "max_fee_minor: 200.00"),
        ("issued_at: 1700000000000", "issued_at: 1.7e12"),
        (
            "window_ms: 86400000 # 24-hour sliding",
            "window_ms: 86400000.0 #",
        ),
        ("max_calls: 40", "max_calls: 40.5"),
        ("v: 1\n", "v: 1.0\n"),
        ("max_refunds_per_payment: 2", "max_refunds_per_payment: 2.0"),
        ("window_ms: null", "window_ms: 1.0"),
    ] {
        let message = yaml_error(&edited(old, new));
        assert!(
            message.contains("float") || message.contains("floating"),
            "{new}: {message}"
        );
    }
}

#[test]
fn quoted_numbers_negatives_and_huge_amounts_are_refused() {
    for (old, new, needle) in [
        (
            "max_amount_minor: 500000",
            "max_amount_minor: \"500000\"",
            "string \"500000\"",
        ),
        (
            "issued_at: 1700000000000",
            "issued_at: '1700000000000'",
            "string \"1700000000000\"",
        ),
        ("max_calls: 40", "max_calls: \"40\"", "string \"40\""),
        (
            "min_amount_minor: 100",
            "min_amount_minor: -100",
            "integer `-100`",
        ),
        (
            "max_amount_minor: 500000",
            "max_amount_minor: 9007199254740993",
            "exceeds the largest",
        ),
        (
            "max_calls: 40",
            "max_calls: 4294967296",
            "at most 4294967295",
        ),
        (
            "max_refunds_per_payment: 2",
            "max_refunds_per_payment: -1",
            "integer `-1`",
        ),
    ] {
        let message = yaml_error(&edited(old, new));
        assert!(message.contains(needle), "{new}: {message}");
    }
}

#[test]
fn malformed_ids_currencies_and_enums_are_refused() {
    for (old, new, needle) in [
        (
            "merchant_id: acc_DEMO000001",
            "merchant_id: acc-DEMO",
            "merchant_id must be",
        ),
        (
            "agent_id: agent_support_bot",
            "agent_id: \"agent bot\"",
            "agent_id must be",
        ),
        (
            "mandate_id: mnd_support_tier1",
            "mandate_id: mnd/1",
            "mandate_id must be",
        ),
        (
            "    create_refund:\n      reversibility",
            "    create refund:\n      reversibility",
            "tool name must be",
        ),
        (
            "currencies: [INR]\n      #",
            "currencies: [inr]\n      #",
            "currency must be",
        ),
        (
            "  fee_budgets:\n    INR:",
            "  fee_budgets:\n    INRR:",
            "currency must be",
        ),
        (
            "reversibility: irreversible",
            "reversibility: sometimes",
            "sometimes",
        ),
        ("on_unresolvable: block", "on_unresolvable: allow", "allow"),
        (
            "trust_tier: \"pinned\"",
            "trust_tier: \"trusted\"",
            "trusted",
        ),
        (
            "mandate_id: mnd_support_tier1",
            "mandate_id: 123",
            "must be quoted",
        ),
    ] {
        let message = yaml_error(&edited(old, new));
        assert!(message.contains(needle), "{new}: {message}");
    }
}

#[test]
fn missing_sections_duplicate_keys_and_merge_keys_are_refused() {
    let no_limits = EXAMPLE.split("\nlimits:").next().unwrap();
    assert!(yaml_error(no_limits).contains("missing field `limits`"));
    let twice = edited("agent_id: agent_support_bot", "agent_id: a\nagent_id: b");
    assert!(yaml_error(&twice).contains("duplicate"));
    let merged = edited(
        "    create_refund:\n      reversibility: irreversible",
        "    create_refund:\n      <<: {reversibility: irreversible}\n      reversibility: irreversible",
    );
    assert!(yaml_error(&merged).contains("merge keys are not allowed"));
}

/// Parses `text` with the mandate's YAML options into an untyped value, to show the budgets hold
/// for input the typed mandate would have refused anyway (the typed parse streams, so a bomb
/// under an unknown key is refused as an unknown field before it expands).
fn untyped(text: &str) -> Result<serde_json::Value, String> {
    serde_saphyr::from_str_with_options(text, yaml::options()).map_err(|error| error.to_string())
}

#[test]
fn an_alias_bomb_is_refused_by_the_budget() {
    let mut bomb = String::from("lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..9 {
        let previous = format!("*l{}", level - 1);
        let row = [previous.as_str(); 9].join(", ");
        bomb.push_str(&format!("lol{level}: &l{level} [{row}]\n"));
    }
    let message = untyped(&bomb).unwrap_err();
    assert!(message.contains("alias replay limit exceeded"), "{message}");
    assert!(yaml_error(&format!("v: 1\n{bomb}")).contains("unknown field `lol0`"));
}

#[test]
fn alias_amplification_inside_a_valid_mandate_is_refused() {
    let window = "    - &w\n      window_ms: 86400000 # 24-hour sliding window";
    let text = edited("    - window_ms: 86400000 # 24-hour sliding window", window).replace(
        "  fee_budgets:",
        &format!(
            "{}  fee_budgets:",
            "    - *w\n".repeat(MANDATE_YAML_ALIASES_MAX + 1)
        ),
    );
    let message = yaml_error(&text);
    assert!(message.contains("budget breached: Aliases"), "{message}");
}

#[test]
fn modest_aliases_still_work() {
    let text = edited(
        "currencies: [INR]\n    create_refund:",
        "currencies: &inr [INR]\n    create_refund:",
    )
    .replace("currencies: [INR]\n      #", "currencies: *inr\n      #");
    assert_eq!(Mandate::parse_yaml(&text).unwrap().hash(), example().hash());
}

#[test]
fn oversized_deep_and_multi_document_input_is_refused() {
    let padding = format!("{EXAMPLE}\n#{}\n", "x".repeat(MANDATE_YAML_BYTES_MAX));
    assert_eq!(
        Mandate::parse_yaml(&padding),
        Err(MandateError::TooLarge {
            bytes: padding.len()
        })
    );
    let deep = format!(
        "{}purpose: {}x{}\n",
        EXAMPLE.replace(
            "purpose: \"Refund duplicate customer charges up to Rs 5,000\"\n",
            ""
        ),
        "[".repeat(MANDATE_YAML_DEPTH_MAX + 1),
        "]".repeat(MANDATE_YAML_DEPTH_MAX + 1)
    );
    assert!(yaml_error(&deep).contains("expected string"));
    let nested = format!(
        "a: {}x{}",
        "[".repeat(MANDATE_YAML_DEPTH_MAX + 1),
        "]".repeat(MANDATE_YAML_DEPTH_MAX + 1)
    );
    assert!(untyped(&nested).unwrap_err().contains("Depth"));
    let two = format!("{EXAMPLE}---\n{EXAMPLE}");
    assert!(yaml_error(&two).contains("Documents"));
}

#[test]
fn the_rules_of_kinds_follow_the_profiles_answer() {
    // A stand-in profile: only create_refund is a refund.
    let kind_of =
        |t: &ToolName| (t.as_str() == "create_refund").then_some(crate::action::ActionKind::Refund);
    let mut m = example();
    m.scope
        .grants
        .get_mut(&tool("fetch_payment"))
        .unwrap()
        .max_refunds_per_payment = Some(1);
    m.idempotency
        .get_mut(&tool("create_refund"))
        .unwrap()
        .window_ms = Some(86_400_000);
    assert!(
        m.validate().is_ok(),
        "kind rules are not the generic validator's"
    );
    let found = m.validate_kinds(kind_of).unwrap_err();
    let found: Vec<_> = found.iter().map(ToString::to_string).collect();
    assert_eq!(
        found,
        [
            "scope.grants.fetch_payment.max_refunds_per_payment: applies only to refund tools, and the rail profile says fetch_payment is not one",
            "idempotency.create_refund.window_ms: must be null for a refund tool, got 86400000: a refund is the same refund however long the agent waits",
        ]
    );
    assert!(example().validate_kinds(kind_of).is_ok());
}
