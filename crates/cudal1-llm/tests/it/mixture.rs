//! `Mixture` over two real clients talking to two real local servers.

use std::sync::Arc;
use std::time::Duration;

use cudal1_llm::{ChatRequest, Llm, Mixture, OpenAiClient, OpenAiConfig};

use crate::server::{ok, Scripted};

fn client(base_url: &str, model: &str) -> Arc<dyn Llm> {
    let mut c = OpenAiConfig::new(base_url, model);
    c.api_key_env = "CUDAL1_TEST_NO_SUCH_KEY".to_owned();
    c.timeout = Duration::from_secs(20);
    Arc::new(OpenAiClient::new(c).unwrap())
}

#[test]
fn requests_are_spread_by_weight() {
    const CALLS: usize = 300;
    let a = Scripted::start(|_, _| ok("from a"));
    let b = Scripted::start(|_, _| ok("from b"));
    let mix = Mixture::new(
        vec![(client(&a.base_url, "model-a"), 3.0), (client(&b.base_url, "model-b"), 1.0)],
        2024,
    )
    .unwrap();
    let described = mix.describe();
    assert!(described.contains("75% openai-compatible `model-a`"), "{described}");
    assert!(described.contains("25% openai-compatible `model-b`"), "{described}");

    let req = ChatRequest::user("x");
    let from_a = (0..CALLS).filter(|_| mix.complete(&req).unwrap().text == "from a").count();
    let (seen_a, seen_b) = (a.finish().len(), b.finish().len());
    assert_eq!(seen_a, from_a, "each reply came from the server that was asked");
    assert_eq!(seen_a + seen_b, CALLS);
    // Expected 225 with a standard deviation of 7.5; allow four of them.
    assert!((195..=255).contains(&seen_a), "model-a got {seen_a} of {CALLS}");
    assert!(seen_b > 0);
}
