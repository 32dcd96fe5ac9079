//! The generator pool: threads that send a round's requests to the LLM, at most `workers` at a
//! time, and hand each reply (or failure) to the loop as soon as it arrives, so that evaluation
//! starts while other samples are still being written.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Scope;
use std::time::Instant;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use cudal1_llm::{ChatRequest, Completion, Llm, LlmError};

use crate::plan::Planned;

/// Whether new requests may start: closed by Ctrl-C, by the loop (a budget is spent, the LLM
/// failed for good) or by the wall-time deadline. Requests already sent finish.
#[derive(Debug)]
pub struct Gate<'a> {
    cancel: &'a AtomicBool,
    halt: AtomicBool,
    deadline: Option<Instant>,
}

impl<'a> Gate<'a> {
    pub fn new(cancel: &'a AtomicBool, deadline: Option<Instant>) -> Self {
        Self { cancel, halt: AtomicBool::new(false), deadline }
    }

    pub fn open(&self) -> bool {
        !self.cancel.load(Ordering::SeqCst)
            && !self.halt.load(Ordering::SeqCst)
            && self.deadline.is_none_or(|d| Instant::now() < d)
    }

    pub fn close(&self) {
        self.halt.store(true, Ordering::SeqCst);
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
}

/// Sampling settings shared by every request.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub max_tokens: u32,
}

/// Held by the loop while it accounts one reply; the worker that sent the request starts its next
/// one only after this is dropped, so a budget the reply spends closes the gate in time: at most
/// one request per worker is ever sent past the point where the budget is known to be spent.
#[derive(Debug)]
pub struct Accounting(#[allow(dead_code)] Sender<()>);

/// What became of one planned request.
#[derive(Debug)]
pub enum Generated {
    Reply {
        planned: Planned,
        result: Result<Completion, LlmError>,
        accounting: Accounting,
    },
    /// Not sent: the gate was closed when its turn came.
    NotSent {
        planned: Planned,
    },
}

/// Starts `workers` threads on `jobs`; the receiver ends once every job is answered or skipped.
pub fn spawn<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    llm: &'env dyn Llm,
    gate: &'env Gate<'env>,
    sampling: Sampling,
    jobs: Vec<Planned>,
    workers: usize,
) -> Receiver<Generated> {
    let (job_tx, job_rx) = unbounded::<Planned>();
    let workers = workers.clamp(1, jobs.len().max(1));
    for job in jobs {
        job_tx.send(job).expect("the receiver is alive");
    }
    drop(job_tx);
    let (tx, rx) = unbounded();
    for _ in 0..workers {
        let (jobs, tx) = (job_rx.clone(), tx.clone());
        scope.spawn(move || {
            for planned in jobs {
                if !gate.open() {
                    let _ = tx.send(Generated::NotSent { planned });
                    continue;
                }
                let request = ChatRequest::user(planned.prompt.clone())
                    .with_temperature(sampling.temperature)
                    .with_top_p(sampling.top_p)
                    .with_max_tokens(sampling.max_tokens)
                    .with_seed(planned.seed);
                tracing::debug!(
                    round = planned.round,
                    index = planned.index,
                    turn = planned.turn,
                    "sending LLM request"
                );
                let result = llm.complete(&request);
                let (accounting, accounted) = bounded::<()>(0);
                if tx
                    .send(Generated::Reply { planned, result, accounting: Accounting(accounting) })
                    .is_err()
                {
                    break;
                }
                // Returns once the loop has dropped the reply's `Accounting`.
                let _ = accounted.recv();
            }
        });
    }
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PromptKind;
    use cudal1_llm::test_server::{Reply, TestServer};
    use cudal1_llm::{OpenAiClient, OpenAiConfig};
    use std::sync::{Arc, Mutex};

    /// A real chat-completions server on 127.0.0.1 that answers with the prompt it was sent,
    /// records the seeds, and sets `flag` once it has seen `close_after` requests (before
    /// answering the last of them).
    fn echo_server(
        close_after: Option<(usize, Arc<AtomicBool>)>,
    ) -> (String, Arc<Mutex<Vec<u64>>>, TestServer) {
        let seeds = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&seeds);
        let server = TestServer::start(move |req| {
            let json = req.json();
            let mut seen = seen.lock().unwrap();
            seen.push(json["seed"].as_u64().unwrap());
            if let Some((n, flag)) = &close_after {
                if seen.len() >= *n {
                    flag.store(true, Ordering::SeqCst);
                }
            }
            let reply = serde_json::json!({
                "choices": [{"message": {"content": json["messages"][0]["content"]}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2}
            });
            Reply::json(200, reply.to_string())
        })
        .unwrap();
        (format!("{}/v1", server.url()), seeds, server)
    }

    fn jobs(n: u32) -> Vec<Planned> {
        (0..n)
            .map(|i| Planned {
                round: 1,
                index: i,
                turn: 1,
                kind: PromptKind::First,
                exemplar_ids: vec![],
                prompt: format!("p{i}"),
                seed: u64::from(i) + 100,
            })
            .collect()
    }

    const SAMPLING: Sampling = Sampling { temperature: 1.0, top_p: 1.0, max_tokens: 16 };

    #[test]
    fn every_job_is_answered_once_with_its_own_seed() {
        let (url, seeds, server) = echo_server(None);
        let llm = OpenAiClient::new(OpenAiConfig::new(url, "m")).unwrap();
        let cancel = AtomicBool::new(false);
        let gate = Gate::new(&cancel, None);
        let mut got: Vec<(u32, String)> = std::thread::scope(|s| {
            spawn(s, &llm, &gate, SAMPLING, jobs(7), 3)
                .iter()
                .map(|g| match g {
                    Generated::Reply { planned, result, .. } => {
                        (planned.index, result.unwrap().text)
                    }
                    Generated::NotSent { .. } => panic!("the gate is open"),
                })
                .collect()
        });
        server.stop();
        got.sort();
        assert_eq!(got, (0..7).map(|i| (i, format!("p{i}"))).collect::<Vec<_>>());
        let mut seeds = seeds.lock().unwrap().clone();
        seeds.sort_unstable();
        assert_eq!(seeds, (100..107).collect::<Vec<_>>());
    }

    #[test]
    fn a_closed_gate_stops_new_requests_but_reports_every_job() {
        let cancel = Arc::new(AtomicBool::new(false));
        let (url, seeds, server) = echo_server(Some((2, Arc::clone(&cancel))));
        let llm = OpenAiClient::new(OpenAiConfig::new(url, "m")).unwrap();
        let gate = Gate::new(&cancel, None);
        let replied: Vec<bool> = std::thread::scope(|s| {
            spawn(s, &llm, &gate, SAMPLING, jobs(6), 1)
                .iter()
                .map(|g| matches!(g, Generated::Reply { .. }))
                .collect()
        });
        server.stop();
        assert_eq!(replied.len(), 6);
        assert_eq!(replied.iter().filter(|r| **r).count(), 2);
        assert_eq!(seeds.lock().unwrap().len(), 2);
        assert!(gate.cancelled());
    }

    #[test]
    fn a_worker_waits_until_its_reply_is_accounted_before_sending_again() {
        // The consumer closes the gate on the second reply, slowly; a worker that went on before
        // the reply was accounted would have sent a third request by then.
        let (url, seeds, server) = echo_server(None);
        let llm = OpenAiClient::new(OpenAiConfig::new(url, "m")).unwrap();
        let cancel = AtomicBool::new(false);
        let gate = Gate::new(&cancel, None);
        let replied = std::thread::scope(|s| {
            let mut replied = 0;
            for g in spawn(s, &llm, &gate, SAMPLING, jobs(6), 1).iter() {
                if let Generated::Reply { accounting, .. } = g {
                    replied += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    if replied == 2 {
                        gate.close();
                    }
                    drop(accounting);
                }
            }
            replied
        });
        server.stop();
        assert_eq!(replied, 2);
        assert_eq!(seeds.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_past_deadline_or_a_halt_closes_the_gate() {
        let cancel = AtomicBool::new(false);
        assert!(!Gate::new(&cancel, Some(Instant::now())).open());
        let gate = Gate::new(&cancel, None);
        assert!(gate.open());
        gate.close();
        assert!(!gate.open() && !gate.cancelled());
    }
}
