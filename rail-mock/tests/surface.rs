//! The tool surface through a real rmcp client over stdio: every tool, the result shapes
//! (insta snapshots), argument validation, the rail's semantics, and startup errors.

mod common;

use common::*;
use insta::assert_json_snapshot;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

/// A JSON value as insta's serializer can read it. The workspace's serde_json keeps numbers as
/// their text (`arbitrary_precision`), which serde_json writes back as numbers but any other
/// serializer sees as a private wrapper struct; the mock's numbers are integers.
struct Plain<'a>(&'a Value);

impl Serialize for Plain<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => serializer.serialize_u64(u),
                (None, Some(i)) => serializer.serialize_i64(i),
                (None, None) => serializer.serialize_str(&n.to_string()),
            },
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Plain(item))?;
                }
                seq.end()
            }
            Value::Object(object) => {
                let mut map = serializer.serialize_map(Some(object.len()))?;
                for (key, value) in object {
                    map.serialize_entry(key, &Plain(value))?;
                }
                map.end()
            }
            other => other.serialize(serializer),
        }
    }
}

#[tokio::test]
async fn tool_list_is_the_razorpay_surface() {
    let journal = fresh_journal("tool-list");
    let mock = spawn_demo(&journal, "none").await;
    let tools = mock.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "fetch_payment",
            "fetch_order",
            "create_refund",
            "fetch_refund",
            "fetch_multiple_refunds_for_payment",
            "fetch_all_refunds",
            "create_instant_settlement",
            "fetch_all_instant_settlements",
            "fetch_instant_settlement_with_id",
            "fetch_balance",
        ]
    );
    for tool in &tools {
        let a = tool.annotations.as_ref().expect("annotations");
        let write = tool.name.starts_with("create_");
        assert_eq!(a.read_only_hint, Some(!write), "{}", tool.name);
        assert_eq!(a.destructive_hint, Some(write), "{}", tool.name);
    }
    let tools = serde_json::to_value(&tools).unwrap();
    assert_json_snapshot!("tool_list", Plain(&tools));
    mock.close().await;
}

#[tokio::test]
async fn every_tool_answers_with_the_api_object() {
    let journal = fresh_journal("shapes");
    let mock = spawn_demo(&journal, "none").await;
    let ts = "[created_at]";

    let payment = mock
        .ok("fetch_payment", json!({"payment_id": "pay_1003"}))
        .await;
    assert_json_snapshot!("payment_partially_refunded", Plain(&payment));
    let payment = mock
        .ok("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_eq!(payment["amount"], 189_900);
    assert_eq!(payment["refund_status"], Value::Null);
    let payment = mock
        .ok("fetch_payment", json!({"payment_id": "pay_1004"}))
        .await;
    assert_eq!(payment["refund_status"], "full");

    let order = mock
        .ok("fetch_order", json!({"order_id": "order_1002"}))
        .await;
    assert_json_snapshot!("order", Plain(&order));

    let refund = mock
        .ok(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 50_000, "speed": "optimum",
                   "receipt": "ilk_demo", "notes": {"interlock_sik": "demo"}}),
        )
        .await;
    assert_json_snapshot!("refund", Plain(&refund), {".created_at" => ts});
    assert_eq!(
        (refund["fee"].as_i64(), refund["tax"].as_i64()),
        (Some(250), Some(45))
    );

    let fetched = mock
        .ok("fetch_refund", json!({"refund_id": refund["id"]}))
        .await;
    assert_eq!(fetched, refund);

    let list = mock
        .ok(
            "fetch_multiple_refunds_for_payment",
            json!({"payment_id": "pay_1003"}),
        )
        .await;
    assert_json_snapshot!("refund_collection", Plain(&list));

    let all = mock.ok("fetch_all_refunds", json!({})).await;
    let ids: Vec<&str> = all["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "rfnd_MOCK0000000001",
            "rfnd_SEED0000000002",
            "rfnd_SEED0000000001"
        ]
    );
    assert_eq!(all["count"], 3);

    let settlement = mock
        .ok(
            "create_instant_settlement",
            json!({"amount": 100_000, "description": "Payday 12", "notes": {"why": "payroll"}}),
        )
        .await;
    assert_json_snapshot!("settlement", Plain(&settlement), {".created_at" => ts});
    assert_eq!(settlement["amount_settled"], 100_000 - 300 - 54);

    let fetched = mock
        .ok(
            "fetch_instant_settlement_with_id",
            json!({"settlement_id": settlement["id"]}),
        )
        .await;
    assert_eq!(fetched, settlement);
    let all = mock
        .ok("fetch_all_instant_settlements", json!({"count": 5}))
        .await;
    assert_eq!(all["items"], json!([settlement]));

    let balance = mock.ok("fetch_balance", json!({})).await;
    assert_json_snapshot!("balance", Plain(&balance));

    let error = mock
        .call("fetch_refund", json!({"refund_id": "rfnd_nope"}))
        .await;
    let error = serde_json::to_value(&error).unwrap();
    assert_json_snapshot!("error_result", Plain(&error));
    mock.close().await;
}

#[tokio::test]
async fn the_rail_refuses_what_razorpay_refuses() {
    let journal = fresh_journal("semantics");
    let mock = spawn_demo(&journal, "none").await;
    let refund = |amount: Value, receipt: &str| json!({"payment_id": "pay_1002", "amount": amount, "receipt": receipt});

    // Amounts are JSON integers: floats, strings, negatives and > 2^53 are refused.
    for (amount, text) in [
        (json!(100.0), "The amount must be an integer."),
        (json!(1.5), "The amount must be an integer."),
        (json!("100"), "The amount must be an integer."),
        (json!(-500), "The amount must be at least 100."),
        (json!(99), "The amount must be at least 100."),
        (
            json!(9_007_199_254_740_993_u64),
            "The amount may not be greater than 9007199254740991.",
        ),
    ] {
        let err = mock.err("create_refund", refund(amount, "r")).await;
        assert_eq!(
            err,
            format!("creating refund failed: BAD_REQUEST_ERROR: {text}")
        );
    }
    let err = mock.err("create_refund", json!({"amount": 100})).await;
    assert_eq!(
        err,
        "creating refund failed: BAD_REQUEST_ERROR: The payment_id field is required."
    );
    let err = mock
        .err("create_refund", json!({"payment_id": "pay_1002"}))
        .await;
    assert_eq!(
        err,
        "creating refund failed: BAD_REQUEST_ERROR: The amount field is required."
    );
    let err = mock
        .err(
            "create_refund",
            json!({"payment_id": "pay_nope", "amount": 100}),
        )
        .await;
    assert_eq!(
        err,
        "creating refund failed: BAD_REQUEST_ERROR: The id provided does not exist"
    );
    let err = mock
        .err("create_refund", refund(json!(100), &"x".repeat(41)))
        .await;
    assert!(err.contains("receipt may not be greater than 40"), "{err}");
    let err = mock
        .err(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 100, "speed": "instant"}),
        )
        .await;
    assert!(
        err.starts_with("creating refund failed: BAD_REQUEST_ERROR: The selected speed"),
        "{err}"
    );
    assert!(
        refunds_of(&inspect(&journal), "pay_1002").is_empty(),
        "nothing applied"
    );

    // Over-refund: the rail's own ceiling, with the unrefunded amount in the text.
    let err = mock
        .err("create_refund", refund(json!(189_901), "r1"))
        .await;
    assert_eq!(
        err,
        "creating refund failed: BAD_REQUEST_ERROR: The refund amount provided is greater than the unrefunded amount of 189900 on pay_1002"
    );
    // amount_refunded and refund_status move with each refund.
    mock.ok("create_refund", refund(json!(89_900), "r1")).await;
    let p = mock
        .ok("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_eq!(
        (p["amount_refunded"].as_i64(), p["refund_status"].as_str()),
        (Some(89_900), Some("partial"))
    );
    // The receipt is unique per payment...
    let err = mock.err("create_refund", refund(json!(100), "r1")).await;
    assert!(
        err.starts_with(
            "creating refund failed: BAD_REQUEST_ERROR: The receipt r1 has already been used"
        ),
        "{err}"
    );
    // ...but not across payments.
    mock.ok(
        "create_refund",
        json!({"payment_id": "pay_1005", "amount": 100, "receipt": "r1"}),
    )
    .await;
    let err = mock
        .err("create_refund", refund(json!(100_001), "r2"))
        .await;
    assert!(
        err.ends_with("unrefunded amount of 100000 on pay_1002"),
        "{err}"
    );
    mock.ok("create_refund", refund(json!(100_000), "r2")).await;
    let p = mock
        .ok("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_eq!(
        (p["amount_refunded"].as_i64(), p["refund_status"].as_str()),
        (Some(189_900), Some("full"))
    );
    let err = mock.err("create_refund", refund(json!(100), "r3")).await;
    assert_eq!(
        err,
        "creating refund failed: BAD_REQUEST_ERROR: The payment has been fully refunded already"
    );
    let dump = inspect(&journal);
    assert_eq!(refunds_of(&dump, "pay_1002").len(), 2);
    assert_eq!(payment_of(&dump, "pay_1002")["amount_refunded"], 189_900);

    // Settlements draw the balance down; more than the balance is refused.
    let err = mock
        .err("create_instant_settlement", json!({"amount": 2_500_001}))
        .await;
    assert_eq!(
        err,
        "creating instant settlement failed: BAD_REQUEST_ERROR: The amount requested is greater than the settleable balance of 2500000"
    );
    let err = mock
        .err("create_instant_settlement", json!({"amount": 199}))
        .await;
    assert!(err.ends_with("The amount must be at least 200."), "{err}");
    let err = mock
        .err(
            "create_instant_settlement",
            json!({"amount": 500, "description": "no-dash"}),
        )
        .await;
    assert!(err.contains("letters, digits and spaces"), "{err}");
    let err = mock
        .err(
            "create_instant_settlement",
            json!({"amount": 500, "settle_full_balance": "yes"}),
        )
        .await;
    assert!(
        err.ends_with("The settle_full_balance must be a boolean."),
        "{err}"
    );
    mock.ok("create_instant_settlement", json!({"amount": 500_000}))
        .await;
    let full = mock
        .ok(
            "create_instant_settlement",
            json!({"amount": 200, "settle_full_balance": true}),
        )
        .await;
    assert_eq!(full["amount_requested"], 2_000_000);
    assert_eq!(mock.ok("fetch_balance", json!({})).await["balance"], 0);
    let err = mock
        .err(
            "create_instant_settlement",
            json!({"amount": 200, "settle_full_balance": true}),
        )
        .await;
    assert!(
        err.contains("below the minimum instant settlement of 200"),
        "{err}"
    );

    // Unknown ids and bad list arguments.
    for (tool, args, what) in [
        (
            "fetch_payment",
            json!({"payment_id": "pay_x"}),
            "fetching payment",
        ),
        (
            "fetch_order",
            json!({"order_id": "order_x"}),
            "fetching order",
        ),
        (
            "fetch_refund",
            json!({"refund_id": "rfnd_x"}),
            "fetching refund",
        ),
        (
            "fetch_instant_settlement_with_id",
            json!({"settlement_id": "setlod_x"}),
            "fetching instant settlement",
        ),
        (
            "fetch_multiple_refunds_for_payment",
            json!({"payment_id": "pay_x"}),
            "fetching refunds for payment",
        ),
    ] {
        let err = mock.err(tool, args).await;
        assert_eq!(
            err,
            format!("{what} failed: BAD_REQUEST_ERROR: The id provided does not exist")
        );
    }
    let err = mock.err("fetch_all_refunds", json!({"count": 101})).await;
    assert_eq!(
        err,
        "fetching refunds failed: BAD_REQUEST_ERROR: The count may not be greater than 100."
    );
    let err = mock.err("fetch_all_refunds", json!({"skip": 1.0})).await;
    assert!(err.ends_with("The skip must be an integer."), "{err}");
    let err = mock.err("fetch_payment", json!({})).await;
    assert!(err.ends_with("The payment_id field is required."), "{err}");
    let unknown = mock
        .client
        .call_tool(rmcp::model::CallToolRequestParams::new("capture_payment"))
        .await;
    assert!(unknown.is_err(), "an unknown tool is a protocol error");
    mock.close().await;
}

#[tokio::test]
async fn lists_filter_by_time_and_page_with_skip() {
    let journal = fresh_journal("lists");
    let mock = spawn_demo(&journal, "none").await;
    let mut made = Vec::new();
    for i in 0..3 {
        let r = mock
            .ok(
                "create_refund",
                json!({"payment_id": "pay_1005", "amount": 1_000 + i}),
            )
            .await;
        made.push(r["id"].as_str().expect("id").to_owned());
    }
    made.reverse(); // newest first
    let page = |skip: u64| json!({"payment_id": "pay_1005", "count": 2, "skip": skip});
    let first = mock.ok("fetch_multiple_refunds_for_payment", page(0)).await;
    let second = mock.ok("fetch_multiple_refunds_for_payment", page(2)).await;
    let ids = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!([ids(&first), ids(&second)].concat(), made);
    assert_eq!(second["count"], 1);
    // Seeded refunds are from 2025; `to` before now keeps only them, `from` after them drops them.
    let old = mock
        .ok("fetch_all_refunds", json!({"to": 1_764_800_000}))
        .await;
    assert_eq!(old["count"], 2);
    let new = mock
        .ok("fetch_all_refunds", json!({"from": 1_764_800_000}))
        .await;
    assert_eq!(ids(&new), made);
    mock.close().await;
}

#[tokio::test]
async fn no_journal_means_an_in_memory_rail() {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["--seed", "demo", "--log-level", "error"]);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn");
    let client = rmcp::ServiceExt::serve((), transport)
        .await
        .expect("initialize");
    let mock = Mock { client, pid: 0 };
    mock.ok(
        "create_refund",
        json!({"payment_id": "pay_1002", "amount": 100}),
    )
    .await;
    let p = mock
        .ok("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_eq!(p["amount_refunded"], 100);
    mock.close().await;
}

/// Run the binary without MCP; `(exit code, stdout, stderr)`.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(BIN)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn startup_errors_are_one_line_on_stderr() {
    let dir = fresh_dir("startup");
    let journal = dir.join("j.db");
    let journal_s = journal.to_str().expect("utf-8 path");
    let bad_seed = dir.join("bad.json");
    std::fs::write(
        &bad_seed,
        "{\n  \"balance\": 10,\n  \"payments\": [{\"id\": \"pay_1\", \"amount\": 1.5}]\n}\n",
    )
    .expect("write");
    let bad_seed_s = bad_seed.to_str().expect("utf-8 path");
    let over_seed = dir.join("over.json");
    std::fs::write(&over_seed, r#"{"balance": 10, "payments": [{"id": "pay_1", "amount": 100}], "refunds": [{"id": "rfnd_1", "payment_id": "pay_1", "amount": 101}]}"#).expect("write");
    let over_seed_s = over_seed.to_str().expect("utf-8 path");
    let other_seed = dir.join("other.json");
    std::fs::write(&other_seed, r#"{"balance": 10}"#).expect("write");
    let other_seed_s = other_seed.to_str().expect("utf-8 path");
    let not_db = dir.join("not-a-db");
    std::fs::write(
        &not_db,
        "hello, I am not SQLite, and this text is long enough to be a header",
    )
    .expect("write");
    let not_db_s = not_db.to_str().expect("utf-8 path");

    // Create a seeded journal to reopen.
    let (code, _, err) = run(&["--journal", journal_s, "--seed", "demo"]);
    assert_eq!(code, 0, "{err}");

    for (args, needle) in [
        (
            vec!["--journal", "/nonexistent/j.db"],
            "journal /nonexistent/j.db: does not exist",
        ),
        (vec![], "no --journal and no --seed"),
        (vec!["--seed", bad_seed_s], "line 3 column"),
        (
            vec!["--seed", over_seed_s],
            "refunds[0].amount: 101 is more than the 100 still refundable on pay_1",
        ),
        (
            vec!["--seed", "/nonexistent/seed.json"],
            "seed /nonexistent/seed.json: cannot read",
        ),
        (
            vec!["--journal", journal_s, "--seed", other_seed_s],
            "was seeded from a different seed",
        ),
        (vec!["--journal", not_db_s], "not a database"),
        (
            vec!["--seed", "demo", "--faults", "timeout_after_apply,bogus=1"],
            "unknown fault profile \"bogus\"",
        ),
        (
            vec!["--seed", "demo", "--faults", "conn_reset@0"],
            "call numbers start at 1",
        ),
        (
            vec!["--seed", "demo", "--faults", "read_lag=x"],
            "\"read_lag=x\": the lag must be a decimal integer",
        ),
        (
            vec!["--seed", "demo", "--faults", "page_size"],
            "page_size needs a parameter",
        ),
        (
            vec!["--seed", "demo", "--tax-bps", "10001"],
            "--tax-bps 10001 is above the limit",
        ),
        (vec!["--seed", "demo", "--no-such-flag"], "--no-such-flag"),
        (
            vec!["inspect", "--journal", "/nonexistent/j.db"],
            "does not exist",
        ),
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            out.is_empty(),
            "{args:?}: stdout must stay empty, got {out}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err:?}");
        assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    }
    // Reopening with the same seed, or with none, is fine.
    let (code, _, err) = run(&["--journal", journal_s, "--seed", "demo"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["--journal", journal_s]);
    assert_eq!(code, 0, "{err}");
}
