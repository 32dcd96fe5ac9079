//! Rewards judged by a real worker on the CPU.

use std::time::Duration;

use cudal1_store::{JobQueue, JobState, ProgramDatabase};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{answer, item, post, Server};

fn results(v: &Value) -> &Vec<Value> {
    v["results"].as_array().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_program_is_judged_once_and_later_requests_are_answered_from_the_queue() {
    let server = Server::start(|_| {}, true).await;
    let url = format!("{}/v1/reward", server.url);
    let same_code_other_words =
        answer("level1/2_Swish", "correct").replace("Analysis: it is faster.", "I fused it.");
    let body = json!({
        "items": [
            item("level1/2_Swish", "correct"),
            {"task": "level1/2_Swish", "completion": same_code_other_words, "id": {"row": 7}},
            item("level1/2_Swish", "nan_output"),
            {"task": "level1/2_Swish", "completion": "I could not write it."},
        ],
        "wait_s": 120,
    });
    let (status, v) = post(&url, &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let r = results(&v);
    assert_eq!(v["pending"], 0, "{v}");
    assert_eq!(
        (r[0]["state"].as_str(), r[0]["verdict"].as_str(), r[0]["reward"].as_f64()),
        (Some("done"), Some("correct"), Some(1.0)),
        "{v}"
    );
    assert_eq!(r[0]["job"], r[1]["job"], "the same code is one job");
    assert_eq!(r[1]["id"], json!({"row": 7}));
    assert_eq!((r[2]["verdict"].as_str(), r[2]["reward"].as_f64()), (Some("incorrect"), Some(0.0)));
    assert!(
        r[2]["reason"].as_str().unwrap().contains("NaN")
            || r[2]["reason"].as_str().unwrap().contains("nan"),
        "{}",
        r[2]["reason"]
    );
    assert_eq!(
        (r[3]["state"].as_str(), r[3]["reward"].as_f64(), r[3]["job"].is_null()),
        (Some("no_code"), Some(0.0), true)
    );
    assert!(r[..3].iter().all(|x| x["cached"] == false && x["program_id"].is_i64()));

    let (_, again) = post(&url, &body).await;
    let r2 = results(&again);
    for i in 0..3 {
        assert_eq!(
            (&r2[i]["job"], &r2[i]["reward"], &r2[i]["cached"]),
            (&r[i]["job"], &r[i]["reward"], &json!(true)),
            "{again}"
        );
    }
    let metrics =
        reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("cudal1_jobs_created_total 2"), "{metrics}");
    assert!(metrics.contains("cudal1_reward_cached_total 3"), "{metrics}");
    let summary = server.finish();
    assert_eq!((summary.evaluated, summary.discarded), (2, 0), "two programs, each evaluated once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_pair_works_and_a_client_that_goes_away_loses_nothing() {
    let server = Server::start(|_| {}, true).await;
    // A program that takes a while to load, so that clients can give up while it runs.
    let slow = answer("level1/2_Swish", "correct")
        .replace("```python\n", "```python\nimport time\ntime.sleep(1.5)\n");
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let gone = impatient
        .post(format!("{}/v1/reward", server.url))
        .json(&json!({"items": [{"task": "level1/2_Swish", "completion": slow}], "wait_s": 60}))
        .send()
        .await;
    assert!(gone.is_err_and(|e| e.is_timeout()), "the client gave up mid-wait");

    let (status, submitted) = post(&format!("{}/v1/reward/submit", server.url), &json!({"items": [{"task": "level1/2_Swish", "completion": slow}, item("level1/3_Softmax_Rows", "correct")]})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{submitted}");
    let jobs: Vec<i64> = results(&submitted).iter().map(|r| r["job"].as_i64().unwrap()).collect();
    assert!(
        results(&submitted).iter().all(|r| r["state"] == "pending" && r["reward"].is_null()),
        "{submitted}"
    );
    assert!(results(&submitted)[0]["reason"].as_str().unwrap().contains("/v1/reward/get"));

    let (status, got) = post(
        &format!("{}/v1/reward/get", server.url),
        &json!({"jobs": [jobs[0], jobs[1], 999_999], "wait_s": 120}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let r = results(&got);
    assert_eq!(
        (r[0]["verdict"].as_str(), r[1]["verdict"].as_str()),
        (Some("correct"), Some("correct")),
        "{got}"
    );
    assert_eq!(r[0]["task"], "level1/2_Swish");
    assert_eq!((r[2]["state"].as_str(), r[2]["reward"].is_null()), (Some("failed"), true));
    assert!(r[2]["reason"].as_str().unwrap().contains("no job 999999"));
    let status = server.store.status(&jobs).unwrap();
    assert!(
        status.iter().all(|s| s.state == JobState::Done && s.attempts == 1 && s.discarded == 0),
        "{status:?}"
    );
    let summary = server.finish();
    assert_eq!(summary.evaluated, 2, "the abandoned wait's program was evaluated once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_rewards_are_speedups_and_feed_the_next_prompts_with_lineage() {
    let server = Server::start(|c| c.default_mode = cudal1_eval::Mode::Full, true).await;
    let task = "level1/1_Diagonal_Matmul";
    let (_, v) = post(
        &format!("{}/v1/reward", server.url),
        &json!({"items": [item(task, "fast"), item(task, "wrong_axis")], "wait_s": 180}),
    )
    .await;
    let r = results(&v);
    assert_eq!(r[0]["verdict"], "correct", "{v}");
    let speedup = r[0]["speedup"]["median"].as_f64().unwrap();
    assert_eq!(r[0]["reward"].as_f64(), Some(speedup));
    assert!(r[0]["speedup"]["ci_low"].as_f64().unwrap() <= speedup && speedup > 1.0, "{v}");
    assert_eq!((r[1]["verdict"].as_str(), r[1]["reward"].as_f64()), (Some("incorrect"), Some(0.0)));

    let (_, prompt) =
        post(&format!("{}/v1/prompt", server.url), &json!({"task": task, "key": "round-2"})).await;
    assert_eq!(prompt["kind"], "contrastive", "{prompt}");
    assert_eq!(
        prompt["exemplars"],
        json!([{"program_id": r[0]["program_id"], "speedup": speedup}]),
        "only the correct program is shown"
    );
    assert!(prompt["prompt"]
        .as_str()
        .unwrap()
        .contains(&format!("speedup {speedup:.2}x (correct)")));
    // A correctness-mode request of the same program is another job, on another shelf.
    let (_, unt) = post(
        &format!("{}/v1/reward", server.url),
        &json!({"items": [item(task, "fast")], "mode": "correctness", "wait_s": 120}),
    )
    .await;
    assert_ne!(results(&unt)[0]["job"], r[0]["job"]);
    assert!(results(&unt)[0]["speedup"].is_null());

    let answer_to_prompt = answer("level1/1_Diagonal_Matmul", "fast")
        .replace("```python\n", "```python\n# a new idea\nimport math\n");
    let (_, child) = post(&format!("{}/v1/reward", server.url), &json!({"items": [{"task": task, "completion": answer_to_prompt, "prompt_id": prompt["prompt_id"]}], "wait_s": 180})).await;
    let child_id = results(&child)[0]["program_id"].as_i64().unwrap();
    let stored = server.store.program(child_id).unwrap().unwrap();
    assert_eq!(
        stored.parent_ids,
        vec![r[0]["program_id"].as_i64().unwrap()],
        "the prompt's exemplars are its parents"
    );
    server.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_split_over_two_requests_is_normalised_once_both_are_scored() {
    let server = Server::start(|_| {}, true).await;
    let url = format!("{}/v1/reward", server.url);
    let member = |file: &str, index: u32| json!({"items": [{"task": "level1/2_Swish", "completion": answer("level1/2_Swish", file), "group": {"id": "g1", "size": 2, "index": index}}], "wait_s": 120});
    let (first, second) = (member("correct", 0), member("nan_output", 1));
    let (a, b) = tokio::join!(post(&url, &first), post(&url, &second));
    let (a, b) = (&results(&a.1)[0], &results(&b.1)[0]);
    assert_eq!((a["reward"].as_f64(), b["reward"].as_f64()), (Some(1.0), Some(0.0)), "{a} {b}");
    assert_eq!(
        (a["group_reward"].as_f64(), b["group_reward"].as_f64()),
        (Some(1.0), Some(-1.0)),
        "{a} {b}"
    );
    // A group that never completes has no group reward, and says nothing false.
    let (_, lone) = post(&url, &json!({"items": [{"task": "level1/2_Swish", "completion": answer("level1/2_Swish", "correct"), "group": {"id": "g2", "size": 3, "index": 0}}], "wait_s": 1})).await;
    assert!(results(&lone)[0].get("group_reward").is_none_or(Value::is_null), "{lone}");
    assert_eq!(results(&lone)[0]["reward"].as_f64(), Some(1.0));
    // Part of a group without indexes would take other members' places: refused, saying what to do.
    let (status, refused) = post(&url, &json!({"items": [{"task": "level1/2_Swish", "completion": answer("level1/2_Swish", "correct"), "group": {"id": "g3", "size": 2}}], "wait_s": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(refused.to_string().contains("index"), "{refused}");
    server.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openrlhf_gets_its_own_shape() {
    let server = Server::start(|c| c.openrlhf_wait = Duration::from_millis(50), true).await;
    let url = format!("{}/openrlhf/get_reward", server.url);
    let prompt = "<|im_start|>user\nMake it faster.\n```python\nclass Model: ...\n```<|im_end|>\n<|im_start|>assistant\n";
    let query = |file: &str| format!("{prompt}{}<|im_end|>", answer("level1/2_Swish", file));
    let body = json!({"query": [query("correct"), query("nan_output"), "a query without its prompt"], "prompts": [prompt, prompt, prompt], "labels": ["level1/2_Swish", "level1/2_Swish", "level1/2_Swish"]});
    // Not judged within the (short) wait: 503, so that OpenRLHF's client tries again.
    let first = reqwest::Client::new().post(&url).json(&body).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(first.headers().contains_key("retry-after"));
    let v = loop {
        let (status, v) = post(&url, &body).await;
        if status == StatusCode::OK {
            break v;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(v["rewards"], json!([1.0, 0.0, 0.0]), "{v}");
    assert_eq!(v["scores"], v["rewards"]);
    assert_eq!(v["extra_logs"]["cudal1_correct"], json!([1.0, 0.0, 0.0]));
    assert_eq!(v["extra_logs"]["cudal1_scored"], json!([1.0, 1.0, 0.0]));
    let (status, _) = post(&url, &json!({"query": ["x"], "prompts": [], "labels": []})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    server.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_answers_waiting_requests_with_what_they_have() {
    let server = Server::start(|_| {}, false).await;
    let url = format!("{}/v1/reward", server.url);
    let waiting = tokio::spawn(async move {
        post(&url, &json!({"items": [item("level1/2_Swish", "correct")], "wait_s": 300})).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.service.shutdown();
    let (status, v) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answered at once")
        .unwrap();
    assert_eq!((status, v["pending"].as_u64()), (StatusCode::OK, Some(1)));
    assert!(results(&v)[0]["reward"].is_null());
}
