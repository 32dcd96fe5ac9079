//! The report in a real headless Chromium, driven over the DevTools protocol: it loads with no
//! console errors, exceptions or network requests besides the file, shows what a person looks
//! for (summary numbers, the fast_p chart, task rows with verdicts, a candidate's code and diff,
//! an exploit finding), its links and sorting work, and a screenshot is taken.
//!
//! Chromium is started with `--remote-debugging-pipe`: it reads commands on fd 3 and writes
//! replies and events on fd 4, each a JSON message ended by a NUL byte. No websocket, no port.
//! Chromium is found on `PATH` (`chromium`, `chromium-browser`, `google-chrome`) or in
//! `CUDAL1_CHROMIUM`; without it the test fails and says how to install it (CI has it).

use super::report::{report, suite};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn find_chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CUDAL1_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH and CUDAL1_CHROMIUM): \
         the report's browser test needs one; install Debian's package (`apt-get install chromium`, as .ci/run does) \
         or set CUDAL1_CHROMIUM to a Chrome or Chromium binary"
    );
}

/// A pipe's two ends, close-on-exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A headless Chromium and one page session.
struct Browser {
    child: Child,
    commands: std::fs::File,
    messages: Receiver<Value>,
    /// Events received while waiting for replies, in order.
    events: Vec<Value>,
    next_id: u64,
    session: Option<String>,
    profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let binary = find_chromium();
        let profile = tempfile::tempdir().unwrap();
        let (cmd_read, cmd_write) = pipe();
        let (msg_read, msg_write) = pipe();
        let (cr, mw) = (cmd_read.as_raw_fd(), msg_write.as_raw_fd());
        let mut cmd = Command::new(&binary);
        cmd.args([
            "--headless",
            "--remote-debugging-pipe",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(profile.path().join("chromium.log")).unwrap());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Move both ends above 4 first, so that placing one cannot clobber the other.
                let (a, b) =
                    (libc::fcntl(cr, libc::F_DUPFD, 10), libc::fcntl(mw, libc::F_DUPFD, 10));
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting `{}`: {e}", binary.display()));
        drop((cmd_read, msg_write));
        let (tx, messages) = channel();
        let mut reader = std::fs::File::from(msg_read);
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            let mut buf = [0u8; 65536];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                pending.extend_from_slice(&buf[..n]);
                while let Some(end) = pending.iter().position(|&b| b == 0) {
                    let message: Vec<u8> = pending.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&message[..message.len() - 1]) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Browser {
            child,
            commands: std::fs::File::from(cmd_write),
            messages,
            events: Vec::new(),
            next_id: 1,
            session: None,
            profile,
        }
    }

    /// Sends a command (to the page's session once attached) and waits for its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).expect("writing to Chromium");
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.messages.recv_timeout(left).unwrap_or_else(|_| {
                panic!("no reply to `{method}` within {WAIT:?}; Chromium said:\n{}", self.log())
            });
            if m["id"] == json!(id) {
                assert!(m.get("error").is_none(), "`{method}` failed: {m}");
                return m["result"].clone();
            }
            self.events.push(m);
        }
    }

    /// Waits for an event named `method`, keeping every event seen.
    fn wait_for(&mut self, method: &str) {
        if self.events.iter().any(|e| e["method"] == method) {
            return;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.messages.recv_timeout(left).unwrap_or_else(|_| {
                panic!("no `{method}` within {WAIT:?}; Chromium said:\n{}", self.log())
            });
            let done = m["method"] == method;
            self.events.push(m);
            if done {
                return;
            }
        }
    }

    /// The end of Chromium's stderr, to explain a browser that does not answer.
    fn log(&self) -> String {
        let text =
            std::fs::read_to_string(self.profile.path().join("chromium.log")).unwrap_or_default();
        text.lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Opens a page target and attaches to it (flat sessions).
    fn open_page(&mut self) {
        let target =
            self.call("Target.createTarget", json!({"url": "about:blank"}))["targetId"].clone();
        let session = self
            .call("Target.attachToTarget", json!({"targetId": target, "flatten": true}))
            ["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        self.session = Some(session);
        for domain in ["Runtime.enable", "Log.enable", "Network.enable", "Page.enable"] {
            self.call(domain, json!({}));
        }
    }

    /// The value of a JavaScript expression (JSON-serialisable), failing on an exception.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "`{expression}` threw: {r}");
        r["result"]["value"].clone()
    }

    fn events(&self, method: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["method"] == method).collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn screenshot(browser: &mut Browser, to: &Path) -> usize {
    let r = browser
        .call("Page.captureScreenshot", json!({"format": "png", "captureBeyondViewport": true}));
    use base64::Engine as _;
    let png =
        base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap();
    std::fs::write(to, &png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    png.len()
}

#[test]
fn a_person_sees_the_report_in_a_real_browser_without_errors_or_requests() {
    let s = suite();
    let file = s.dir.join("browser.html");
    report(&s.db, &["--batch", s.summary["batch"].as_str().unwrap()], &file);
    let url = format!("file://{}", file.canonicalize().unwrap().display());
    let mut b = Browser::start();
    b.open_page();
    b.call("Page.navigate", json!({"url": url}));
    b.wait_for("Page.loadEventFired");

    // The summary: the correct rate over tasks and the geomean speedup, as eval summarised them.
    let shown = b.eval("(() => { const r = document.querySelector('table.summary tr[data-over=tasks]'); const cell = k => r.querySelector(`td[data-key=${k}]`); return {rate: cell('correct_rate').textContent.trim(), geomean: cell('geomean_speedup').textContent.trim(), width: r.getBoundingClientRect().width}; })()");
    let tasks = &s.summary["tasks"];
    assert_eq!(
        shown["rate"],
        json!(format!("{:.1}%", tasks["correct_rate"].as_f64().unwrap() * 100.0)),
        "{shown}"
    );
    assert_eq!(
        shown["geomean"],
        json!(format!("{:.2}x", tasks["geomean_speedup"].as_f64().unwrap())),
        "{shown}"
    );
    assert!(shown["width"].as_f64().unwrap() > 200.0, "the summary is not laid out: {shown}");

    // The fast_p chart: drawn, with a curve and a visible size.
    let chart = b.eval("(() => { const svg = document.querySelector('svg#fast-p'); const r = svg.getBoundingClientRect(); return {curves: svg.querySelectorAll('polyline.series').length, w: r.width, h: r.height}; })()");
    assert!(
        chart["curves"].as_u64().unwrap() >= 1
            && chart["w"].as_f64().unwrap() > 300.0
            && chart["h"].as_f64().unwrap() > 150.0,
        "{chart}"
    );

    // A row per task with its best candidate's verdict.
    let rows = b.eval("Array.from(document.querySelectorAll('#task-table tr.task-row')).map(r => [r.dataset.task, r.querySelector('[data-verdict]').dataset.verdict])");
    let rows: Vec<(String, String)> = serde_json::from_value(rows).unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.contains(&("level1/1_Diagonal_Matmul".into(), "correct".into())), "{rows:?}");

    // Following the exploit's finding opens its details, with code and a diff against the reference.
    let exploit =
        s.rows.iter().find(|r| r["verdict"] == "exploit").unwrap()["id"].as_i64().unwrap();
    let finding = b.eval("Array.from(document.querySelectorAll('#findings-table tr.finding-row')).map(r => r.textContent)");
    assert!(finding.to_string().contains("output_aliases_input"), "{finding}");
    let opened = b.eval(&format!(
        "(() => {{ document.querySelector('#findings-table a[href=\"#b1-e{exploit}\"]').click(); const d = document.getElementById('b1-e{exploit}'); return {{open: d.open, code: d.querySelector('pre.code').textContent, added: d.querySelectorAll('pre.diff .add').length, removed: d.querySelectorAll('pre.diff .del').length, codeHeight: d.querySelector('pre.code').getBoundingClientRect().height}}; }})()"
    ));
    assert_eq!(opened["open"], json!(true), "{opened}");
    assert!(opened["code"].as_str().unwrap().contains("class ModelNew"), "{opened}");
    assert!(
        opened["added"].as_u64().unwrap() > 0 && opened["removed"].as_u64().unwrap() > 0,
        "{opened}"
    );
    assert!(opened["codeHeight"].as_f64().unwrap() > 50.0, "the code is not visible: {opened}");

    // Sorting the candidates by speedup puts the fastest first, then last.
    let order = b.eval("(() => { const th = Array.from(document.querySelectorAll('#candidate-table th')).find(h => h.textContent.trim() === 'speedup'); const first = () => document.querySelector('#candidate-table tbody tr').dataset.id; th.click(); const asc = first(); th.click(); return [asc, first()]; })()");
    let fastest = s
        .rows
        .iter()
        .filter(|r| r["speedup"]["median"].is_f64())
        .max_by(|a, b| {
            a["speedup"]["median"].as_f64().partial_cmp(&b["speedup"]["median"].as_f64()).unwrap()
        })
        .unwrap()["id"]
        .to_string();
    assert_eq!(order[1], json!(fastest), "descending order should start with the fastest: {order}");
    assert_ne!(order[0], order[1], "{order}");

    let shot = s.dir.join("report.png");
    let size = screenshot(&mut b, &shot);
    assert!(size > 50_000, "the screenshot is {size} bytes: an empty page?");

    // Nothing went wrong, and nothing was fetched but the file itself.
    let errors: Vec<&Value> = b
        .events
        .iter()
        .filter(|e| {
            e["method"] == "Runtime.exceptionThrown"
                || (e["method"] == "Runtime.consoleAPICalled"
                    && matches!(e["params"]["type"].as_str(), Some("error" | "assert" | "warning")))
                || (e["method"] == "Log.entryAdded"
                    && matches!(e["params"]["entry"]["level"].as_str(), Some("error" | "warning")))
        })
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    let requests: Vec<&str> = b
        .events("Network.requestWillBeSent")
        .iter()
        .filter_map(|e| e["params"]["request"]["url"].as_str())
        .collect();
    assert!(!requests.is_empty(), "the page's own load was not seen: is the Network domain on?");
    assert!(requests.iter().all(|u| *u == url), "requests besides the file: {requests:?}");
    eprintln!("screenshot: {}", shot.display());
}
