//! Reconciliation through the real mock when its list pages are shorter than asked: the proof
//! must be found on whatever page it is on. (Found by the chaos matrix: the adapter once took a
//! short page for the last one and skipped by pages × the count asked, so a refund on page two
//! was called absent and the agent's retry was refused by the rail's receipt check, leaving the
//! ledger at CONFIRMED_NOT_APPLIED with the money gone.)

mod common;

use std::time::{Duration, Instant};

use common::{block, scene};

async fn reconciled_after_a_lost_answer(faults: &str) {
    let scene = scene("pagination", &[]);
    let flags = ["--call-timeout-ms", "1000", "--reconcile-every-ms", "200"];
    let proxy = scene.proxy(faults, &flags).await;
    // pay_1003 has a seeded refund: oldest first, ours is on the second page of one item.
    let first = proxy.refund("pay_1003", 12_345).await;
    assert_eq!(block(&first)["outcome"], "UNKNOWN", "{}", block(&first));
    let deadline = Instant::now() + Duration::from_secs(30);
    let replay = loop {
        let again = proxy.refund("pay_1003", 12_345).await;
        let info = block(&again);
        if info["outcome"] == "APPLIED" {
            break info;
        }
        assert!(
            ["IN_PROGRESS", "UNKNOWN"].contains(&info["outcome"].as_str().unwrap_or("")),
            "{faults}: {info}"
        );
        assert!(
            Instant::now() < deadline,
            "{faults}: not reconciled in time: {info}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    proxy.close().await;
    let stamped = scene.stamped_refunds_of("pay_1003");
    assert_eq!(stamped.len(), 1, "{faults}: {stamped:?}");
    assert_eq!(replay["idempotent_replay"], true, "{replay}");
    assert_eq!(replay["rail_entity_id"], stamped[0]["id"], "{replay}");
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_on_the_second_page_of_one_item_is_found() {
    reconciled_after_a_lost_answer("timeout_after_apply@1,page_size=1,oldest_first").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_on_the_first_page_of_one_item_is_found() {
    reconciled_after_a_lost_answer("timeout_after_apply@1,page_size=1").await;
}
