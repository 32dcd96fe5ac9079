//! What the service refuses, and how: no evaluation runs here.

use reqwest::StatusCode;
use serde_json::json;

use crate::{item, post, queued, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_401_and_health_needs_none() {
    let server = Server::start(|c| c.token = Some("s3cret".into()), false).await;
    let client = reqwest::Client::new();
    let body = json!({"items": [item("level1/2_Swish", "correct")], "wait_s": 0});
    for auth in
        [None, Some("Bearer wrong"), Some("Bearer s3cret2"), Some("s3cret"), Some("Basic s3cret")]
    {
        let mut req = client.post(format!("{}/v1/reward", server.url)).json(&body);
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let v: serde_json::Value = r.json().await.unwrap();
        assert!(v["error"].as_str().unwrap().contains("bearer token"), "{v}");
    }
    for path in ["/metrics", "/v1/tasks"] {
        assert_eq!(
            client.get(format!("{}{path}", server.url)).send().await.unwrap().status(),
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    assert_eq!(queued(&server.store), 0, "nothing was queued");
    let ok = client
        .post(format!("{}/v1/reward/submit", server.url))
        .bearer_auth("s3cret")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::ACCEPTED);
    let open = client.get(format!("{}/health", server.url)).send().await.unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    let open: serde_json::Value = open.json().await.unwrap();
    let limits =
        json!({"max_body_bytes": 16 << 20, "max_items": 1024, "max_completion_bytes": 256 << 10});
    assert_eq!(
        open,
        json!({"status": "ok", "limits": limits}),
        "without the token, liveness and the request limits only: no store, tasks or queue"
    );
    let full: serde_json::Value = client
        .get(format!("{}/health", server.url))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(full["queue"]["queued"], 1, "{full}");
    assert!(full["store"].as_str().is_some(), "{full}");
    assert_eq!(queued(&server.store), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_requests_are_clear_4xx_and_store_nothing() {
    let server = Server::start(
        |c| {
            c.limits.max_body_bytes = 64 << 10;
            c.limits.max_items = 4;
            c.limits.max_completion_bytes = 16 << 10;
        },
        false,
    )
    .await;
    let url = format!("{}/v1/reward", server.url);
    let client = reqwest::Client::new();
    let raw = |body: &'static str| {
        client.post(&url).header("content-type", "application/json").body(body).send()
    };
    let cases: Vec<(reqwest::Response, StatusCode, &str)> = vec![
        (raw("{\"items\": [").await.unwrap(), StatusCode::BAD_REQUEST, "parse"),
        (raw("{\"items\": 3}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "items"),
        (raw("{\"items\": [{\"task\": \"level1/2_Swish\"}]}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "completion"),
        (raw("{\"items\": [], \"mode\": \"full\"}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "empty"),
        (raw("{\"items\": [{\"task\": \"level1/2_Swish\", \"completion\": \"x\"}], \"colour\": 1}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "colour"),
        (raw("{\"items\": [{\"task\": \"level1/2_Swish\", \"completion\": \"x\"}], \"mode\": \"fast\"}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "mode"),
        (raw("{\"items\": [{\"task\": \"level9/1_Nope\", \"completion\": \"x\"}]}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "unknown task"),
        (raw("{\"items\": [{\"task\": \"level1/2_Swish\", \"completion\": \"x\", \"group\": {\"id\": \"g\", \"size\": 2, \"index\": 2}}]}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "group"),
        (raw("{\"items\": [{\"task\": \"level1/2_Swish\", \"completion\": \"x\"}], \"wait_s\": -1}").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "wait_s"),
        (client.post(&url).body("{\"items\": []}").send().await.unwrap(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "Content-Type"),
        (client.post(&url).json(&json!({"items": vec![item("level1/2_Swish", "correct"); 5]})).send().await.unwrap(), StatusCode::PAYLOAD_TOO_LARGE, "at most 4"),
        (client.post(&url).json(&json!({"items": [{"task": "level1/2_Swish", "completion": "x".repeat(20 << 10)}]})).send().await.unwrap(), StatusCode::PAYLOAD_TOO_LARGE, "bytes"),
        (client.post(&url).json(&json!({"items": [{"task": "level1/2_Swish", "completion": "x".repeat(100 << 10)}]})).send().await.unwrap(), StatusCode::PAYLOAD_TOO_LARGE, "larger"),
        (client.get(format!("{}/v2/nothing", server.url)).send().await.unwrap(), StatusCode::NOT_FOUND, "routes"),
        (client.get(&url).send().await.unwrap(), StatusCode::METHOD_NOT_ALLOWED, ""),
    ];
    for (response, status, words) in cases {
        assert_eq!(response.status(), status, "{words}");
        if status != StatusCode::METHOD_NOT_ALLOWED {
            let v: serde_json::Value = response.json().await.unwrap();
            assert!(
                v["error"].as_str().unwrap().contains(words)
                    || v["hint"].as_str().is_some_and(|h| h.contains(words)),
                "{status}: {v}"
            );
        }
    }
    // One bad item refuses the whole batch: nothing of it is queued.
    let mixed = json!({"items": [item("level1/2_Swish", "correct"), {"task": "nope", "completion": "x"}], "wait_s": 0});
    assert_eq!(post(&url, &mixed).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(queued(&server.store), 0, "nothing was stored");
    let metrics =
        reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("cudal1_http_requests_total{route=\"/v1/reward\",status=\"413\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("cudal1_queue_jobs{state=\"queued\"} 0"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_reproducible_from_their_key_and_exported_as_jsonl() {
    let server = Server::start(|_| {}, false).await;
    let url = format!("{}/v1/prompt", server.url);
    let ask = |key: &str| json!({"task": "level1/2_Swish", "key": key});
    let (status, a) = post(&url, &ask("k")).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(a["kind"], "first", "no program is known yet");
    assert!(
        a["prompt"].as_str().unwrap().contains("torch.sigmoid")
            || a["prompt"].as_str().unwrap().contains("class Model")
    );
    assert_eq!(a["messages"][0]["role"], "user");
    let (_, again) = post(&url, &ask("k")).await;
    assert_eq!((&again["prompt_id"], &again["prompt"]), (&a["prompt_id"], &a["prompt"]));
    let (_, other) = post(&url, &json!({"task": "level1/2_Swish"})).await;
    assert_ne!(other["prompt_id"], a["prompt_id"], "a random key when none is given");
    assert_eq!(post(&url, &json!({"task": "nope"})).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        post(&url, &json!({"task": "level1/2_Swish", "temperature": 0})).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    let text = reqwest::get(format!(
        "{}/v1/prompts/export?tasks=level1/2_Swish,level2/1_Linear_ReLU&per_task=3&key=ep",
        server.url
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    let rows: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 6);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["data_source"], "cudal1");
        assert_eq!(r["reward_model"]["ground_truth"], r["task"]);
        assert_eq!(r["extra_info"]["index"], i);
        assert_eq!(r["prompt"][0]["content"], r["prompt_text"]);
    }
    let again = reqwest::get(format!(
        "{}/v1/prompts/export?tasks=level1/2_Swish,level2/1_Linear_ReLU&per_task=3&key=ep&as_of={}",
        server.url, rows[0]["as_of"]
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert_eq!(again, text, "the same export again");
    let bad = reqwest::get(format!("{}/v1/prompts/export?per_task=0", server.url)).await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// `language` (issue 31): a prompt asks for Triton kernels when its request says so, or when the
/// server's default is Triton and the request does not say; a prompt in each language has its own
/// id, a CUDA prompt keeps the id it has on a server that knows only CUDA, and an unknown language
/// is a clear 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_ask_for_the_language_of_the_request_or_the_servers_default() {
    let asks_triton = |p: &serde_json::Value| {
        let text = p["prompt"].as_str().unwrap();
        let triton = text.contains("with PyTorch and Triton.")
            && text.contains("functions under `@triton.jit`")
            && text.contains("Do not build CUDA C++ extensions");
        let cuda = text.contains("with PyTorch and CUDA.")
            && text.contains("compiled with `torch.utils.cpp_extension.load_inline` are welcome");
        assert_ne!(triton, cuda, "{text}");
        assert_eq!(p["language"], if triton { "triton" } else { "cuda" }, "{p}");
        triton
    };
    let cuda_server = Server::start(|_| {}, false).await;
    let url = format!("{}/v1/prompt", cuda_server.url);
    let (status, cuda) = post(&url, &json!({"task": "level1/2_Swish", "key": "k"})).await;
    assert_eq!(status, StatusCode::OK, "{cuda}");
    assert!(!asks_triton(&cuda));
    let ask = json!({"task": "level1/2_Swish", "key": "k", "language": "triton"});
    let (status, triton) = post(&url, &ask).await;
    assert_eq!(status, StatusCode::OK, "{triton}");
    assert!(asks_triton(&triton));
    assert_ne!(triton["prompt_id"], cuda["prompt_id"], "another language, another prompt");
    assert_eq!(post(&url, &ask).await.1["prompt_id"], triton["prompt_id"], "reproducible");
    let (status, bad) = post(&url, &json!({"task": "level1/2_Swish", "language": "rust"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("`cuda` or `triton`"), "{bad}");

    let export = |server: &str, language: &str| {
        let url = format!(
            "{server}/v1/prompts/export?tasks=level1/2_Swish,level2/1_Linear_ReLU&per_task=2&key=ep{language}"
        );
        async move {
            let text = reqwest::get(url).await.unwrap().text().await.unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<serde_json::Value>>()
        }
    };
    let rows = export(&cuda_server.url, "&language=triton").await;
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(r["language"], "triton", "{r}");
        assert!(r["prompt_text"].as_str().unwrap().contains("@triton.jit"), "{r}");
    }
    let cuda_rows = export(&cuda_server.url, "").await;
    assert!(cuda_rows.iter().all(|r| r["language"] == "cuda"));

    // A server whose default is Triton: requests that do not say get Triton, and one that asks
    // for CUDA gets the very prompt a CUDA server makes.
    let triton_server =
        Server::start(|c| c.prompt_defaults.language = cudal1_search::Language::Triton, false)
            .await;
    let url = format!("{}/v1/prompt", triton_server.url);
    let (_, by_default) = post(&url, &json!({"task": "level1/2_Swish", "key": "k"})).await;
    assert!(asks_triton(&by_default));
    assert_eq!(by_default["prompt_id"], triton["prompt_id"]);
    let (_, asked_cuda) =
        post(&url, &json!({"task": "level1/2_Swish", "key": "k", "language": "cuda"})).await;
    assert!(!asks_triton(&asked_cuda));
    assert_eq!(
        (&asked_cuda["prompt_id"], &asked_cuda["prompt"]),
        (&cuda["prompt_id"], &cuda["prompt"])
    );
    let defaulted = export(&triton_server.url, "").await;
    assert!(defaulted.iter().all(|r| r["language"] == "triton"), "{defaulted:?}");
}

/// A prompt shows earlier programs of its own language and plain PyTorch ones only: a Triton
/// prompt never offers a CUDA program as the variant to beat, nor a CUDA prompt a Triton one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_show_exemplars_of_their_own_language_and_plain_pytorch() {
    use cudal1_store::{NewProgram, ProgramDatabase, ProgramKey};
    let server = Server::start(|_| {}, false).await;
    let task = crate::suite()["level1/2_Swish"].hash.clone();
    let settings_hash = cudal1_eval::Judge::new("cpu").settings_hash(&cudal1_eval::EvalSettings {
        mode: cudal1_eval::Mode::Full,
        ..crate::settings()
    });
    let cuda = "import torch\nfrom torch.utils.cpp_extension import load_inline\next = load_inline(name='swish_cuda', cpp_sources='', cuda_sources='')\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return ext.f(x)\n";
    let triton = "import torch, triton\nimport triton.language as tl\n@triton.jit\ndef swish_triton(x_ptr):\n    pass\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        swish_triton[(1,)](x)\n        return x\n";
    let pytorch = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * torch.sigmoid(x)  # swish_pytorch\n";
    let mut ids = Vec::new();
    for (i, (code, speedup)) in [(cuda, 3.0), (triton, 2.0), (pytorch, 1.2)].into_iter().enumerate()
    {
        let id = server
            .store
            .insert_program(&NewProgram {
                key: ProgramKey {
                    task_hash: task.clone(),
                    code_hash: format!("h{i}"),
                    settings_hash: settings_hash.clone(),
                },
                code: code.into(),
                run_id: "earlier".into(),
                round: 1,
                trajectory: None,
                turn: 1,
                parent_ids: vec![],
                verdict: "correct".into(),
                reason: String::new(),
                reason_class: String::new(),
                speedup_median: Some(speedup),
                speedup_ci_low: Some(speedup),
                speedup_ci_high: Some(speedup),
                evaluation: json!({}),
            })
            .unwrap();
        ids.push(id);
    }
    let url = format!("{}/v1/prompt", server.url);
    let shown = |p: &serde_json::Value| {
        let mut ids: Vec<i64> = p["exemplars"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["program_id"].as_i64().unwrap())
            .collect();
        ids.sort_unstable();
        ids
    };
    for key in ["a", "b", "c"] {
        let (status, c) =
            post(&url, &json!({"task": "level1/2_Swish", "key": key, "exemplars": 3})).await;
        assert_eq!(status, StatusCode::OK, "{c}");
        assert_eq!(shown(&c), [ids[0], ids[2]], "{c}");
        let text = c["prompt"].as_str().unwrap();
        assert!(text.contains("swish_cuda") && !text.contains("swish_triton"), "{text}");

        let ask =
            json!({"task": "level1/2_Swish", "key": key, "exemplars": 3, "language": "triton"});
        let (status, t) = post(&url, &ask).await;
        assert_eq!(status, StatusCode::OK, "{t}");
        assert_eq!(shown(&t), [ids[1], ids[2]], "{t}");
        let text = t["prompt"].as_str().unwrap();
        assert!(text.contains("swish_triton") && !text.contains("swish_cuda"), "{text}");
        // The recorded prompt's exemplars (the parents of its answers) are the ones shown.
        let again = post(&url, &ask).await.1;
        assert_eq!(again["exemplars"], t["exemplars"], "reproducible");
    }
}
