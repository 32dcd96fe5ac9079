//! `cudal1 export`: the store's evaluations as JSON lines (each as `cudal1 show ID --json`
//! prints it) or CSV (one flat row each), for analysis elsewhere.

use crate::args::{ExportArgs, ExportFormat};
use crate::exit::Status;
use crate::record;
use crate::workspace::open_existing;
use anyhow::{bail, Context, Result};
use cudal1_store::StoredEvaluation;
use std::io::Write;

/// The CSV columns, in order.
const COLUMNS: [&str; 19] = [
    "id",
    "created_at",
    "batch_id",
    "task",
    "task_path",
    "candidate",
    "verdict",
    "reason_class",
    "speedup_median",
    "speedup_ci_low",
    "speedup_ci_high",
    "ref_ms",
    "candidate_ms",
    "device",
    "mode",
    "duration_ms",
    "judge",
    "gpu_class",
    "reason",
];

pub fn run(a: &ExportArgs) -> Result<Status> {
    let store = open_existing(&a.db.db)?;
    let rows = match &a.batch {
        Some(b) => {
            if store.find_batch(b)?.is_none() {
                bail!("`{}` holds no batch `{b}`\nhint: `cudal1 eval` prints its batch id last (`batch ... saved in ...`) and in its `--json` summary", a.db.db.display());
            }
            store.evaluations_for_batch(b)?
        }
        None => store.all_evaluations()?,
    };
    let mut sink: Box<dyn Write> = match &a.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("creating `{}`", path.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    match a.format {
        ExportFormat::Jsonl => {
            for r in &rows {
                writeln!(sink, "{}", record::stored_json(r))?;
            }
        }
        ExportFormat::Csv => {
            writeln!(sink, "{}", COLUMNS.join(","))?;
            for r in &rows {
                writeln!(
                    sink,
                    "{}",
                    csv_row(r).iter().map(|f| csv_field(f)).collect::<Vec<_>>().join(",")
                )?;
            }
        }
    }
    sink.flush()?;
    if let Some(path) = &a.out {
        eprintln!("{} evaluation(s) written to {}", rows.len(), path.display());
    }
    Ok(Status::Done)
}

fn csv_row(r: &StoredEvaluation) -> Vec<String> {
    let num = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
    let m = &r.measurements;
    let text = |k: &str| m.get(k).and_then(serde_json::Value::as_str).unwrap_or("").to_owned();
    vec![
        r.id.to_string(),
        r.created_at.clone(),
        r.batch_id.clone().unwrap_or_default(),
        r.task_name.clone(),
        r.task_path.clone(),
        r.candidate_label.clone(),
        r.verdict.clone(),
        text("reason_class"),
        num(r.speedup_median),
        num(r.speedup_ci_low),
        num(r.speedup_ci_high),
        num(r.ref_ms),
        num(r.candidate_ms),
        r.device.clone(),
        m.get("mode").and_then(serde_json::Value::as_str).unwrap_or("full").to_owned(),
        r.duration_ms.to_string(),
        r.key.judge.clone(),
        r.key.gpu_class.clone(),
        r.reason.clone(),
    ]
}

/// RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_they_must_be() {
        assert_eq!(csv_field("correct"), "correct");
        assert_eq!(csv_field("a, b"), "\"a, b\"");
        assert_eq!(csv_field("say \"x\"\nnext"), "\"say \"\"x\"\"\nnext\"");
    }
}
