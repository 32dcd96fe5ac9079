//! Rewards: each item's program is extracted from its completion and queued as a job (the same
//! task, code and settings are one job, measured once); the request then waits, up to its
//! deadline, for the jobs to finish. A result is never made up: an item that could not be scored
//! has a null reward and says why.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudal1_eval::{EvalSettings, Evaluation, Mode, Verdict};
use cudal1_queue::JobSpec;
use cudal1_search::extract_program;
use cudal1_store::{Enqueued, JobState, JobStatus, NewJob};
use tokio::sync::Notify;

use crate::api::{ItemState, RewardItem, RewardRequest, RewardResult, Speedup};
use crate::error::ApiError;
use crate::Service;

/// An item ready to queue, or already answered.
pub(crate) enum Prepared {
    Job { job: NewJob, prompt_id: Option<String> },
    NoCode { reason: String },
}

impl Service {
    /// The mode a request asks for.
    pub(crate) fn mode_of(&self, text: Option<&str>) -> Result<Mode, ApiError> {
        match text {
            None => Ok(self.config.default_mode),
            Some(t) => Mode::parse(t).map_err(ApiError::unprocessable),
        }
    }

    pub(crate) fn settings_for(&self, mode: Mode) -> EvalSettings {
        EvalSettings { mode, ..self.config.settings.clone() }
    }

    /// Checks every item and makes its job; nothing is queued when any item is refused.
    pub(crate) fn prepare(
        &self,
        items: &[RewardItem],
        mode: Mode,
        priority: i32,
    ) -> Result<Vec<Prepared>, ApiError> {
        let limits = &self.config.limits;
        if items.is_empty() {
            return Err(ApiError::unprocessable("`items` is empty"));
        }
        if items.len() > limits.max_items {
            return Err(ApiError::too_large(format!(
                "{} items in one request; at most {} are taken",
                items.len(),
                limits.max_items
            )));
        }
        if let Some((i, item)) = items
            .iter()
            .enumerate()
            .find(|(_, it)| it.completion.len() > limits.max_completion_bytes)
        {
            return Err(ApiError::too_large(format!(
                "item {i} ({}): the completion has {} bytes; at most {} are taken",
                item.task,
                item.completion.len(),
                limits.max_completion_bytes
            )));
        }
        let unknown: Vec<&str> = items
            .iter()
            .map(|i| i.task.as_str())
            .filter(|t| !self.config.tasks.contains_key(*t))
            .collect();
        if let Some(first) = unknown.first() {
            let mut some: Vec<&str> =
                self.config.tasks.keys().take(3).map(String::as_str).collect();
            if self.config.tasks.len() > 3 {
                some.push("...");
            }
            return Err(ApiError::unprocessable(format!(
                "unknown task `{first}` ({} item(s) name tasks the suite does not have)",
                unknown.len()
            ))
            .hint(format!(
                "tasks are named as `cudal1 eval` names them ({}); `GET /v1/tasks` lists them",
                some.join(", ")
            )));
        }
        let mut in_request: std::collections::HashMap<&str, (u32, bool)> =
            std::collections::HashMap::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(g) = &item.group {
                if g.size == 0
                    || g.size > 65_536
                    || g.index.is_some_and(|x| x >= g.size)
                    || g.id.is_empty()
                {
                    return Err(ApiError::unprocessable(format!("item {i}: a group needs an id, a size from 1 to 65536 and an index below its size")));
                }
                let seen = in_request.entry(g.id.as_str()).or_insert((0, false));
                seen.0 += 1;
                seen.1 |= g.index.is_none();
            }
        }
        // A member without an index takes its place among this request's members of the group,
        // which is only its place in the group when the request holds the whole group: a retry
        // of some members would otherwise land on other members' places.
        for item in items {
            if let Some(g) = &item.group {
                let (count, unindexed) = in_request[g.id.as_str()];
                if unindexed && count != g.size {
                    return Err(ApiError::unprocessable(format!("group `{}`: this request holds {count} of its {} members, and some have no `index`", g.id, g.size))
                        .hint("give every member its `index` when a group's members come in separate requests (or are sent again)"));
                }
            }
        }
        let settings = self.settings_for(mode);
        let judge = cudal1_eval::Judge::new(self.config.gpu_class.clone());
        Ok(items
            .iter()
            .map(|item| match extract_program(&item.completion) {
                Ok(code) => {
                    let task = &self.config.tasks[&item.task];
                    let spec = JobSpec {
                        task,
                        code: &code,
                        settings: &settings,
                        judge: &judge,
                        parent_ids: Vec::new(),
                        priority,
                        max_attempts: self.config.max_attempts,
                        compile_stage: self.config.compile_stage,
                    };
                    Prepared::Job { job: spec.to_job(), prompt_id: item.prompt_id.clone() }
                }
                Err(e) => Prepared::NoCode { reason: format!("no program in the completion: {e}") },
            })
            .collect())
    }

    /// Queues the jobs (with their prompts' exemplars as parents); in the items' order, `None`
    /// for items without a job.
    pub(crate) async fn enqueue(
        &self,
        prepared: &mut [Prepared],
    ) -> Result<Vec<Option<Enqueued>>, ApiError> {
        let mut jobs: Vec<NewJob> = Vec::new();
        let mut prompt_ids: Vec<Option<String>> = Vec::new();
        for p in prepared.iter_mut() {
            if let Prepared::Job { job, prompt_id } = p {
                jobs.push(job.clone());
                prompt_ids.push(prompt_id.take());
            }
        }
        let store = Arc::clone(&self.store);
        let enqueued = self
            .blocking(move || {
                for (job, prompt) in jobs.iter_mut().zip(&prompt_ids) {
                    if let Some(p) =
                        prompt.as_deref().map(|id| store.find_prompt(id)).transpose()?.flatten()
                    {
                        job.parent_ids = p.exemplar_ids;
                    }
                }
                store.enqueue(&jobs)
            })
            .await?;
        self.metrics.jobs_created.inc_by(enqueued.iter().filter(|e| e.created).count() as u64);
        let mut it = enqueued.into_iter();
        Ok(prepared
            .iter()
            .map(|p| matches!(p, Prepared::Job { .. }).then(|| it.next()).flatten())
            .collect())
    }

    /// Waits until every pending result has its job's outcome, or the deadline.
    pub(crate) async fn wait_for(
        &self,
        results: &mut [RewardResult],
        deadline: Instant,
    ) -> Result<(), ApiError> {
        loop {
            let pending: Vec<i64> = results
                .iter()
                .filter(|r| r.state == ItemState::Pending)
                .filter_map(|r| r.job)
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
            // Registered before looking, so that a job finishing in between still wakes us.
            let notify = Arc::new(Notify::new());
            self.waiters.register(&pending, &notify);
            let store = Arc::clone(&self.store);
            let ids = pending.clone();
            let statuses: HashMap<i64, JobStatus> = self
                .blocking(move || store.status(&ids))
                .await?
                .into_iter()
                .map(|s| (s.id, s))
                .collect();
            for r in results.iter_mut().filter(|r| r.state == ItemState::Pending) {
                if let Some(s) = r.job.and_then(|j| statuses.get(&j)) {
                    fill(r, s);
                }
            }
            let now = Instant::now();
            if now >= deadline
                || self.closing()
                || results.iter().all(|r| r.state != ItemState::Pending)
            {
                return Ok(());
            }
            let nap = self.config.poll.min(deadline - now);
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(nap) => {}
            }
        }
    }

    /// The whole of `POST /v1/reward` (`wait` zero for `/submit`).
    pub(crate) async fn reward(
        &self,
        req: RewardRequest,
        wait: Duration,
    ) -> Result<Vec<RewardResult>, ApiError> {
        let mode = self.mode_of(req.mode.as_deref())?;
        let clip = req.clip.unwrap_or(self.config.clip);
        if !(clip.is_finite() && clip > 0.0) {
            return Err(ApiError::unprocessable("`clip` must be a positive number"));
        }
        let deadline = Instant::now() + wait;
        let mut prepared = self.prepare(&req.items, mode, req.priority.unwrap_or(0))?;
        let enqueued = self.enqueue(&mut prepared).await?;
        let mut results: Vec<RewardResult> = req
            .items
            .iter()
            .zip(&prepared)
            .zip(&enqueued)
            .enumerate()
            .map(|(index, ((item, p), e))| {
                let mut r = RewardResult {
                    index,
                    id: item.id.clone(),
                    task: item.task.clone(),
                    job: e.as_ref().map(|e| e.id),
                    state: ItemState::Pending,
                    reward: None,
                    verdict: None,
                    reason: String::new(),
                    reason_class: None,
                    speedup: None,
                    program_id: None,
                    cached: e.as_ref().is_some_and(|e| !e.created && e.state.is_final()),
                    group_reward: None,
                };
                if let Prepared::NoCode { reason } = p {
                    r.state = ItemState::NoCode;
                    r.reward = Some(0.0);
                    r.reason.clone_from(reason);
                    r.reason_class = Some("no_code".into());
                }
                r
            })
            .collect();
        self.wait_for(&mut results, deadline).await?;
        if req.items.iter().any(|i| i.group.is_some()) {
            let deadline = if self.closing() { Instant::now() } else { deadline };
            self.groups.settle(&req.items, &mut results, deadline, clip).await;
        }
        for r in &results {
            self.count(r);
        }
        Ok(results)
    }

    pub(crate) fn count(&self, r: &RewardResult) {
        let state = match r.state {
            ItemState::Done => "done",
            ItemState::Pending => "pending",
            ItemState::Failed => "failed",
            ItemState::NoCode => "no_code",
        };
        self.metrics
            .items
            .get_or_create(&crate::metrics::StateLabels { state: state.into() })
            .inc();
        if let Some(v) = &r.verdict {
            self.metrics
                .verdicts
                .get_or_create(&crate::metrics::VerdictLabels { verdict: v.clone() })
                .inc();
        }
        if r.cached {
            self.metrics.cached.inc();
        }
    }
}

/// Updates a pending result from its job.
pub(crate) fn fill(r: &mut RewardResult, s: &JobStatus) {
    match s.state {
        JobState::Queued | JobState::Running => {
            r.reason = format!("{} (job {}); ask again with the same request, or `POST /v1/reward/get` with the job", s.state.as_str(), s.id);
        }
        JobState::Failed => {
            r.state = ItemState::Failed;
            r.reward = None;
            r.reason = s.error.clone().unwrap_or_else(|| "the job failed without a reason".into());
            r.reason_class = Some("unscored".into());
        }
        JobState::Done => {
            let mode = Mode::parse(&s.mode).unwrap_or(Mode::Full);
            match s.result.clone().map(serde_json::from_value::<Evaluation>) {
                Some(Ok(e)) => {
                    r.state = ItemState::Done;
                    r.program_id = s.program_id;
                    r.verdict = Some(e.verdict.as_str().to_owned());
                    r.reason.clone_from(&e.reason);
                    r.reason_class = Some(e.reason_class.clone());
                    r.speedup = e.speedup.map(|i| Speedup {
                        median: i.median,
                        ci_low: i.ci_low,
                        ci_high: i.ci_high,
                    });
                    (r.reward, r.state) = match reward_of(&e, mode) {
                        Ok(x) => (Some(x), ItemState::Done),
                        Err(why) => {
                            r.reason = format!("{why} ({})", e.reason);
                            (None, ItemState::Failed)
                        }
                    };
                }
                other => {
                    r.state = ItemState::Failed;
                    r.reason = match other {
                        Some(Err(e)) => format!("the job's result cannot be read: {e}"),
                        _ => "the job is done but holds no result".into(),
                    };
                }
            }
        }
    }
}

/// The speedup of a correct program (1 when not timed), 0 for any other verdict.
fn reward_of(e: &Evaluation, mode: Mode) -> Result<f64, String> {
    if e.verdict != Verdict::Correct {
        return Ok(0.0);
    }
    if !mode.times() {
        return Ok(1.0);
    }
    match e.speedup.map(|s| s.median) {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err("correct, but without a usable speedup".into()),
    }
}
