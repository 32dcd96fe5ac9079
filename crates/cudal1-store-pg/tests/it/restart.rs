//! A PostgreSQL restart under a store in use: operations wait for the server and succeed, and
//! subscribers are told to check everything again.

use std::time::Duration;

use cudal1_store::{JobQueue, QueueSignal};
use cudal1_store_pg::test_server::TestPostgres;
use cudal1_store_pg::PgStore;

use crate::{claim, evaluated, eventually, job};

#[test]
fn operations_survive_a_server_restart_and_subscribers_resync() {
    let server = match TestPostgres::start() {
        Ok(s) => s,
        Err(why) => {
            assert!(std::env::var_os("CUDAL1_REQUIRE_PG").is_none(), "{why}");
            eprintln!("skipping: {why}");
            return;
        }
    };
    let q = PgStore::connect_with(&server.url(), Duration::from_secs(60)).unwrap();
    let heard = q.subscribe();
    let id = q.enqueue(&[job("restart", "1")]).unwrap()[0].id;
    q.claim(&claim("w", 1, Duration::from_secs(60))).unwrap();
    // Wait until the listener is connected, so that the restart cuts it.
    eventually(Duration::from_secs(10), "the listener", || {
        q.enqueue(&[job("restart", &format!("{:?}", std::time::Instant::now()))]).unwrap();
        heard.recv_timeout(Duration::from_millis(100)).ok().filter(|s| *s == QueueSignal::Queued)
    });

    server.stop();
    // A worker finishing its job while the server is down: the write waits for the server.
    let done = std::thread::scope(|s| {
        let writer = s.spawn(|| q.complete(id, "w", &evaluated("correct", None)));
        std::thread::sleep(Duration::from_millis(300));
        server.start_again();
        writer.join().unwrap()
    });
    assert!(done.unwrap(), "the result is written once the server is back:\n{}", server.log());
    eventually(Duration::from_secs(20), "a resync after the lost connection", || {
        heard.recv_timeout(Duration::from_millis(100)).ok().filter(|s| *s == QueueSignal::Resync)
    });
    assert_eq!(q.status(&[id]).unwrap()[0].verdict.as_deref(), Some("correct"));
}
