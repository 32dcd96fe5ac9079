//! The routes, and what every request goes through: the bearer token (all but `/health`), the
//! body size limit, JSON that must parse into the request's type, and a metric and a log line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, MatchedPath, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::api::{
    ExportQuery, GetRequest, ItemState, OpenRlhfRequest, OpenRlhfResponse, PromptRequest,
    RewardItem, RewardRequest, RewardResponse, RewardResult,
};
use crate::error::ApiError;
use crate::metrics::{RouteLabels, RouteOnly, StateLabels};
use crate::prompt::PromptSpec;
use crate::Service;

/// JSON in, with rejections as [`ApiError`]s (400 for broken JSON, 422 for the wrong shape,
/// 413 for a body over the limit, 415 without a JSON content type).
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(rejection_error(&rejection)),
        }
    }
}

fn rejection_error(r: &JsonRejection) -> ApiError {
    let status = r.status();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            "the request body is larger than this server takes".to_owned()
        }
        _ => r.body_text(),
    };
    let e = ApiError::new(status, message);
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => e.hint(
            "send fewer items per request, or start `cudal1 serve` with a larger `--max-body`",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => e.hint("send `Content-Type: application/json`"),
        _ => e,
    }
}

pub fn router(service: Arc<Service>) -> Router {
    let limit = service.config.limits.max_body_bytes;
    let guarded = Router::new()
        .route("/v1/reward", post(reward))
        .route("/v1/reward/submit", post(submit))
        .route("/v1/reward/get", post(get_results))
        .route("/v1/prompt", post(prompt))
        .route("/v1/prompts/export", get(export))
        .route("/v1/tasks", get(tasks))
        .route("/openrlhf/get_reward", post(openrlhf))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&service), auth));
    Router::new()
        .route("/health", get(health))
        .merge(guarded)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(Arc::clone(&service), observe))
        .with_state(service)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such route").hint("routes: POST /v1/reward, /v1/reward/submit, /v1/reward/get, /v1/prompt, /openrlhf/get_reward; GET /v1/prompts/export, /v1/tasks, /health, /metrics")
}

async fn auth(
    State(s): State<Arc<Service>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if !authorized(&s, &headers) && !token_in_query(&s, &req) {
        return ApiError::unauthorized().into_response();
    }
    next.run(req).await
}

/// OpenRLHF's HTTP client sends no headers of its own: on its route the token may come as the
/// URL's `token` query parameter (`--reward.remote_url http://HOST:8377/openrlhf/get_reward?token=...`).
fn token_in_query(s: &Service, req: &Request) -> bool {
    let Some(token) = s.config.token.as_ref() else { return true };
    if req.uri().path() != "/openrlhf/get_reward" {
        return false;
    }
    let query = req.uri().query().unwrap_or("");
    query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("token="))
        .any(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
}

/// Whether the request carries the server's bearer token (always, when it has none).
fn authorized(s: &Service, headers: &HeaderMap) -> bool {
    s.config.token.as_ref().is_none_or(|token| {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        constant_time_eq(given.as_bytes(), token.as_bytes())
    })
}

/// Compares without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in b.iter().enumerate() {
        diff |= x ^ a.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

async fn observe(State(s): State<Arc<Service>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().clone();
    let started = Instant::now();
    let response = next.run(req).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    s.metrics.requests.get_or_create(&RouteLabels { route: route.clone(), status }).inc();
    s.metrics
        .latency
        .get_or_create(&RouteOnly { route: route.clone() })
        .observe(took.as_secs_f64());
    tracing::info!(%method, route, status, ms = took.as_secs_f64() * 1e3, "request");
    response
}

/// Liveness for anyone; the store, tasks and queue only with the token (when there is one).
async fn health(
    State(s): State<Arc<Service>>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    // What a client must split its requests to (nothing secret): given to anyone.
    let limits = serde_json::json!({
        "max_body_bytes": s.config.limits.max_body_bytes,
        "max_items": s.config.limits.max_items,
        "max_completion_bytes": s.config.limits.max_completion_bytes,
    });
    if !authorized(&s, &headers) {
        return Ok(Json(serde_json::json!({"status": "ok", "limits": limits})));
    }
    let store = Arc::clone(&s.store);
    let counts = s.blocking(move || store.counts()).await?;
    Ok(Json(serde_json::json!({
        "status": "ok",
        "store": s.store.describe(),
        "tasks": s.config.tasks.len(),
        "gpu_class": s.config.gpu_class,
        "judge": cudal1_eval::judge_version(),
        "mode": s.config.default_mode,
        "queue": counts,
        "limits": limits,
    })))
}

async fn metrics(State(s): State<Arc<Service>>) -> Result<Response, ApiError> {
    let store = Arc::clone(&s.store);
    let counts = s.blocking(move || store.counts()).await?;
    for (state, n) in [
        ("queued", counts.queued),
        ("running", counts.running),
        ("done", counts.done),
        ("failed", counts.failed),
    ] {
        s.metrics
            .queue
            .get_or_create(&StateLabels { state: state.into() })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    Ok((
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        s.metrics.render(),
    )
        .into_response())
}

async fn tasks(State(s): State<Arc<Service>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({"tasks": s.config.tasks.keys().collect::<Vec<_>>()}))
}

impl Service {
    fn wait_of(&self, asked: Option<f64>) -> Result<Duration, ApiError> {
        match asked {
            None => Ok(self.config.default_wait),
            Some(x) if x.is_finite() && x >= 0.0 => {
                Ok(Duration::from_secs_f64(x).min(self.config.max_wait))
            }
            Some(_) => {
                Err(ApiError::unprocessable("`wait_s` must be a number of seconds, 0 or more"))
            }
        }
    }
}

fn response(results: Vec<RewardResult>) -> Json<RewardResponse> {
    let pending = results.iter().filter(|r| r.state == ItemState::Pending).count();
    Json(RewardResponse { results, pending })
}

async fn reward(
    State(s): State<Arc<Service>>,
    ApiJson(req): ApiJson<RewardRequest>,
) -> Result<Json<RewardResponse>, ApiError> {
    let wait = s.wait_of(req.wait_s)?;
    Ok(response(s.reward(req, wait).await?))
}

async fn submit(
    State(s): State<Arc<Service>>,
    ApiJson(req): ApiJson<RewardRequest>,
) -> Result<(StatusCode, Json<RewardResponse>), ApiError> {
    if req.items.iter().any(|i| i.group.is_some()) {
        return Err(ApiError::unprocessable(
            "the group barrier needs the waiting form: use `POST /v1/reward`",
        ));
    }
    Ok((StatusCode::ACCEPTED, response(s.reward(req, Duration::ZERO).await?)))
}

async fn get_results(
    State(s): State<Arc<Service>>,
    ApiJson(req): ApiJson<GetRequest>,
) -> Result<Json<RewardResponse>, ApiError> {
    if req.jobs.len() > s.config.limits.max_items {
        return Err(ApiError::too_large(format!(
            "{} jobs in one request; at most {} are taken",
            req.jobs.len(),
            s.config.limits.max_items
        )));
    }
    let wait = s.wait_of(req.wait_s)?;
    let deadline = Instant::now() + wait;
    let store = Arc::clone(&s.store);
    let ids = req.jobs.clone();
    let known: std::collections::HashMap<i64, cudal1_store::JobStatus> =
        s.blocking(move || store.status(&ids)).await?.into_iter().map(|st| (st.id, st)).collect();
    let mut results: Vec<RewardResult> = req
        .jobs
        .iter()
        .enumerate()
        .map(|(index, id)| {
            let status = known.get(id);
            let mut r = RewardResult {
                index,
                id: None,
                task: status.map(|st| st.task_name.clone()).unwrap_or_default(),
                job: Some(*id),
                state: ItemState::Pending,
                reward: None,
                verdict: None,
                reason: String::new(),
                reason_class: None,
                speedup: None,
                program_id: None,
                cached: status.is_some_and(|st| st.state.is_final()),
                group_reward: None,
            };
            if status.is_none() {
                r.state = ItemState::Failed;
                r.job = None;
                r.reason = format!("no job {id} in the queue `{}`", s.store.describe());
            }
            r
        })
        .collect();
    s.wait_for(&mut results, deadline).await?;
    for r in &results {
        s.count(r);
    }
    Ok(response(results))
}

async fn prompt(
    State(s): State<Arc<Service>>,
    ApiJson(req): ApiJson<PromptRequest>,
) -> Result<Json<crate::api::PromptResponse>, ApiError> {
    let spec = s.prompt_spec(req)?;
    let service = Arc::clone(&s);
    Ok(Json(s.blocking_api(move || service.make_prompt(&spec)).await?))
}

async fn export(
    State(s): State<Arc<Service>>,
    query: Result<Query<ExportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let tasks: Vec<String> = match &q.tasks {
        Some(list) => {
            list.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect()
        }
        None => s.config.tasks.keys().cloned().collect(),
    };
    let per_task = q.per_task.unwrap_or(1);
    if per_task == 0 || per_task > 10_000 || tasks.len().saturating_mul(per_task) > 100_000 {
        return Err(ApiError::unprocessable(
            "`per_task` must be from 1 to 10000, and the export at most 100000 prompts",
        ));
    }
    let base = q.key.clone().unwrap_or_else(|| "export".into());
    let d = &s.config.prompt_defaults;
    let specs: Vec<PromptSpec> = tasks
        .iter()
        .flat_map(|t| {
            (0..per_task).map(|i| PromptSpec {
                task: t.clone(),
                key: format!("{base}:{i}"),
                exemplars: q.exemplars.unwrap_or(d.exemplars),
                temperature: q.temperature.unwrap_or(d.temperature),
                bucket_width: q.bucket_width.unwrap_or(d.bucket_width),
                as_of: q.as_of,
                language: q.language.unwrap_or(d.language),
            })
        })
        .collect();
    let service = Arc::clone(&s);
    let body = s
        .blocking_api(move || {
            // One watermark for the whole set.
            let as_of = match specs.first().and_then(|sp| sp.as_of) {
                Some(x) => x,
                None => service.store.last_program_id()?,
            };
            let mut out = String::new();
            for (index, mut spec) in specs.into_iter().enumerate() {
                spec.as_of = Some(as_of);
                let p = service.make_prompt(&spec)?;
                out.push_str(&Service::export_row(&p, index).to_string());
                out.push('\n');
            }
            Ok(out)
        })
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// The response part of an OpenRLHF query: what follows its prompt. Without the prompt in it,
/// nothing: the prompt's own code blocks must never be taken for the answer's.
fn response_part<'a>(query: &'a str, prompt: Option<&str>) -> Option<&'a str> {
    let prompt = prompt.filter(|p| !p.is_empty())?;
    query.find(prompt).map(|at| &query[at + prompt.len()..])
}

async fn openrlhf(
    State(s): State<Arc<Service>>,
    ApiJson(req): ApiJson<OpenRlhfRequest>,
) -> Result<Response, ApiError> {
    let n = req.query.len();
    if req.labels.len() != n || req.prompts.len() != n {
        return Err(ApiError::unprocessable(format!("{n} queries need as many `prompts` and `labels` (got {} and {})", req.prompts.len(), req.labels.len()))
            .hint("export prompts with `GET /v1/prompts/export` and train with `--data.input_key prompt --data.label_key task`"));
    }
    // Queries whose answer cannot be told from their prompt are not scored.
    let mut items = Vec::new();
    let mut places = Vec::new();
    for i in 0..n {
        if let Some(answer) = response_part(&req.query[i], req.prompts.get(i).map(String::as_str)) {
            places.push(Some(items.len()));
            items.push(RewardItem {
                task: req.labels[i].clone(),
                completion: answer.to_owned(),
                prompt_id: None,
                group: None,
                id: None,
            });
        } else {
            places.push(None);
        }
    }
    let results = if items.is_empty() {
        Vec::new()
    } else {
        let request = RewardRequest { items, mode: None, wait_s: None, priority: None, clip: None };
        s.reward(request, s.config.openrlhf_wait).await?
    };
    if results.iter().any(|r| r.state == ItemState::Pending) {
        // OpenRLHF retries; the same request then finds the same jobs.
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "still evaluating; send the same request again",
        ));
    }
    let mut rewards = Vec::with_capacity(n);
    let (mut speedup, mut correct, mut scored, mut cached) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for place in &places {
        let r = place.map(|p| &results[p]);
        let reward = r.and_then(|r| r.reward);
        // OpenRLHF makes a tensor of every reward: no nulls (`cudal1_scored` tells them apart).
        rewards.push(reward.unwrap_or(0.0));
        speedup.push(r.and_then(|r| r.speedup.as_ref()).map_or(0.0, |x| x.median));
        correct
            .push(f64::from(u8::from(r.is_some_and(|r| r.verdict.as_deref() == Some("correct")))));
        scored.push(f64::from(u8::from(reward.is_some())));
        cached.push(f64::from(u8::from(r.is_some_and(|r| r.cached))));
    }
    let unmatched = places.iter().filter(|p| p.is_none()).count();
    if unmatched > 0 {
        s.metrics.openrlhf_unmatched.inc_by(unmatched as u64);
        // Loud: every such sample trains on a reward of 0.
        tracing::warn!(
            unmatched,
            of = n,
            "OpenRLHF queries that do not contain their prompt byte for byte are not scored (reward 0, `cudal1_scored` 0): does the tokenizer's decode change the prompt? compare a query with its prompt"
        );
    }
    let mut extra_logs = serde_json::Map::new();
    for (k, v) in [
        ("cudal1_speedup", speedup),
        ("cudal1_correct", correct),
        ("cudal1_scored", scored),
        ("cudal1_cached", cached),
    ] {
        extra_logs.insert(k.into(), v.into());
    }
    Ok(Json(OpenRlhfResponse { scores: rewards.clone(), rewards, extra_logs }).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secre", b"secret"));
        assert!(!constant_time_eq(b"secret!", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }

    #[test]
    fn the_answer_is_what_follows_the_prompt() {
        let prompt = "<|user|>write it\n```python\nclass Model: ...\n```<|assistant|>";
        let query = format!("{prompt}here:\n```python\nclass ModelNew: ...\n```");
        assert_eq!(
            response_part(&query, Some(prompt)),
            Some("here:\n```python\nclass ModelNew: ...\n```")
        );
        assert_eq!(response_part(&query, Some("not in it")), None);
        assert_eq!(response_part(&query, None), None);
        assert_eq!(response_part(&query, Some("")), None);
    }
}
