//! `OpenAiClient` against a real local HTTP server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudal1_llm::{
    ChatRequest, Llm, LlmError, Message, OpenAiClient, OpenAiConfig, Prices, RetryPolicy,
};

use crate::server::{completion_json, ok, Reply, Scripted};

/// Fast retries so tests spend their time only where a test means it to.
fn config(base_url: &str) -> OpenAiConfig {
    let mut c = OpenAiConfig::new(base_url, "test-model");
    c.api_key_env = "CUDAL1_TEST_NO_SUCH_KEY".to_owned();
    c.timeout = Duration::from_secs(20);
    c.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
    };
    c
}

#[test]
fn good_reply_is_parsed_and_the_request_is_well_formed() {
    let srv = Scripted::start(|_, _| {
        Reply::Send(200, completion_json("class ModelNew: pass", "served-name", 123, 45), vec![])
    });
    let client = OpenAiClient::new(config(&format!("{}/v1/", srv.base_url))).unwrap();
    let req = ChatRequest::new(vec![Message::system("be fast"), Message::user("optimise")])
        .with_temperature(0.7)
        .with_top_p(0.9)
        .with_max_tokens(321)
        .with_seed(99);
    let c = client.complete(&req).unwrap();
    assert_eq!(c.text, "class ModelNew: pass");
    assert_eq!((c.prompt_tokens, c.completion_tokens), (123, 45));
    assert_eq!(c.model, "served-name");
    assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    let u = client.usage().snapshot();
    assert_eq!((u.prompt_tokens, u.completion_tokens, u.requests, u.attempts), (123, 45, 1, 1));

    let seen = srv.finish();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    assert_eq!(seen[0].header("authorization"), None, "no key configured, no header");
    let body = seen[0].json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "optimise");
    assert_eq!(body["max_tokens"], 321);
    assert_eq!(body["seed"], 99);
    assert!((body["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
    assert!((body["top_p"].as_f64().unwrap() - 0.9).abs() < 1e-6);
}

#[test]
fn rate_limit_with_retry_after_is_honoured_then_succeeds() {
    let srv = Scripted::start(|i, _| {
        if i == 0 {
            Reply::Send(
                429,
                r#"{"error":{"message":"slow down"}}"#.into(),
                vec![("Retry-After", "1".into())],
            )
        } else {
            ok("second time lucky")
        }
    });
    let mut cfg = config(&srv.base_url);
    cfg.retry.max_delay = Duration::from_secs(10);
    let client = OpenAiClient::new(cfg).unwrap();
    let started = Instant::now();
    let c = client.complete(&ChatRequest::user("x")).unwrap();
    let waited = started.elapsed();
    assert_eq!(c.text, "second time lucky");
    // base_delay is 1 ms, so only the header explains a wait of a second.
    assert!(waited >= Duration::from_millis(950), "waited only {waited:?}");
    assert_eq!(srv.finish().len(), 2);
    assert_eq!(client.usage().snapshot().attempts, 2);
}

#[test]
fn server_errors_are_retried_until_success() {
    let srv =
        Scripted::start(
            |i, _| if i < 2 { Reply::Send(500, "boom".into(), vec![]) } else { ok("fine") },
        );
    let client = OpenAiClient::new(config(&srv.base_url)).unwrap();
    assert_eq!(client.complete(&ChatRequest::user("x")).unwrap().text, "fine");
    assert_eq!(srv.finish().len(), 3);
    let u = client.usage().snapshot();
    assert_eq!((u.attempts, u.requests), (3, 1));
}

#[test]
fn retries_run_out_with_the_last_status() {
    let srv = Scripted::start(|_, _| {
        Reply::Send(503, r#"{"error":{"message":"overloaded"}}"#.into(), vec![])
    });
    let mut cfg = config(&srv.base_url);
    cfg.retry.max_retries = 2;
    let client = OpenAiClient::new(cfg).unwrap();
    match client.complete(&ChatRequest::user("x")) {
        Err(LlmError::Status { status: 503, attempts: 3, message, .. }) => {
            assert_eq!(message, "overloaded")
        }
        other => panic!("expected 503 after 3 attempts, got {other:?}"),
    }
    assert_eq!(srv.finish().len(), 3);
}

#[test]
fn client_errors_are_not_retried_and_carry_the_message() {
    let srv = Scripted::start(|_, _| {
        Reply::Send(
            400,
            r#"{"error":{"message":"maximum context length is 32768 tokens","type":"invalid_request_error"}}"#.into(),
            vec![],
        )
    });
    let client = OpenAiClient::new(config(&srv.base_url)).unwrap();
    let err = client.complete(&ChatRequest::user("x")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LlmError::Status { status: 400, attempts: 1, .. }), "{err:?}");
    assert!(
        text.contains("400") && text.contains("maximum context length is 32768 tokens"),
        "{text}"
    );
    assert_eq!(srv.finish().len(), 1);
}

#[test]
fn a_server_that_never_answers_times_out_in_time() {
    let srv = Scripted::start(|_, _| Reply::Hang);
    let mut cfg = config(&srv.base_url);
    cfg.timeout = Duration::from_millis(400);
    let client = OpenAiClient::new(cfg).unwrap();
    let started = Instant::now();
    let err = client.complete(&ChatRequest::user("x")).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert!(took >= Duration::from_millis(350), "gave up too early: {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?} for a 400 ms timeout");
    // Timeouts are not retried.
    assert_eq!(srv.finish().len(), 1);
}

#[test]
fn refused_connections_are_retried_then_reported() {
    // A port that was just free: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut cfg = config(&format!("http://127.0.0.1:{port}"));
    cfg.retry.max_retries = 2;
    let client = OpenAiClient::new(cfg).unwrap();
    let err = client.complete(&ChatRequest::user("x")).unwrap_err();
    assert!(matches!(err, LlmError::Connection { attempts: 3, .. }), "{err:?}");
    assert!(std::error::Error::source(&err).is_some(), "the transport error is kept as the source");
    assert_eq!(client.usage().snapshot().attempts, 3);
}

#[test]
fn api_key_is_sent_from_the_named_variable() {
    let var = format!("CUDAL1_IT_KEY_{}", std::process::id());
    // Edition 2021: set_var is safe; the name is unique to this test.
    std::env::set_var(&var, "sk-test-123");
    let srv = Scripted::start(|_, _| ok("hi"));
    let mut cfg = config(&srv.base_url);
    cfg.api_key_env = var.clone();
    let client = OpenAiClient::new(cfg).unwrap();
    std::env::remove_var(&var);
    client.complete(&ChatRequest::user("x")).unwrap();
    let seen = srv.finish();
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-test-123"));
}

#[test]
fn cost_cap_stops_sending() {
    // 100k prompt + 50k completion tokens at $2 / $8 per million = $0.60 per call.
    let srv = Scripted::start(|_, _| {
        Reply::Send(200, completion_json("x", "m", 100_000, 50_000), vec![])
    });
    let mut cfg = config(&srv.base_url);
    cfg.prices = Prices { prompt_per_million: 2.0, completion_per_million: 8.0 };
    cfg.cost_cap_usd = Some(1.0);
    let client = OpenAiClient::new(cfg).unwrap();
    let req = ChatRequest::user("x");
    client.complete(&req).unwrap();
    client.complete(&req).unwrap(); // $0.60 spent < $1.00: still sent.
    match client.complete(&req) {
        Err(LlmError::BudgetExhausted { spent_usd, cap_usd }) => {
            assert!((spent_usd - 1.2).abs() < 1e-9, "{spent_usd}");
            assert!((cap_usd - 1.0).abs() < 1e-12);
        }
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
    // A clone shares the budget.
    assert!(matches!(client.clone().complete(&req), Err(LlmError::BudgetExhausted { .. })));
    assert_eq!(srv.finish().len(), 2, "refused requests must not reach the server");
    let u = client.usage().snapshot();
    assert_eq!((u.prompt_tokens, u.completion_tokens, u.requests), (200_000, 100_000, 2));
}

#[test]
fn concurrency_limit_is_never_exceeded() {
    const K: usize = 3;
    const ROUNDS: usize = 3;
    const TOTAL: usize = K * ROUNDS;
    // (in flight, answered, most in flight at once)
    let state =
        Arc::new((std::sync::Mutex::new((0usize, 0usize, 0usize)), std::sync::Condvar::new()));
    let gate = Arc::clone(&state);
    let srv = Scripted::start(move |_, _| {
        let (lock, changed) = &*gate;
        let mut s = lock.lock().unwrap();
        s.0 += 1;
        s.2 = s.2.max(s.0);
        changed.notify_all();
        // Hold requests until K are in flight at once (fewer for the last ones). If the client
        // allowed fewer, this fails instead of hanging.
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.0 < K.min(TOTAL - s.1) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "only {} of {K} requests arrived together", s.0);
            s = changed.wait_timeout(s, left).unwrap().0;
        }
        // With K held, a correct client has every other caller blocked on its semaphore:
        // nothing more may arrive. This bounded wait is a window for a violation to show, not a
        // sleep that a passing run depends on.
        drop(s);
        std::thread::sleep(Duration::from_millis(150));
        let mut s = lock.lock().unwrap();
        s.0 -= 1;
        s.1 += 1;
        changed.notify_all();
        Reply::Send(200, completion_json("ok", "m", 1, 1), vec![])
    });
    let base_url = srv.base_url.clone();
    let mut cfg = config(&base_url);
    cfg.max_concurrent = K;
    let client = OpenAiClient::new(cfg).unwrap();
    let callers: Vec<_> = (0..K * ROUNDS)
        .map(|_| {
            let c = client.clone();
            std::thread::spawn(move || c.complete(&ChatRequest::user("x")).map(|c| c.text))
        })
        .collect();
    for h in callers {
        assert_eq!(h.join().unwrap().unwrap(), "ok");
    }
    assert_eq!(srv.finish().len(), TOTAL);
    assert_eq!(
        state.0.lock().unwrap().2,
        K,
        "the server must see exactly K requests at once, never more"
    );
}
