//! `cudal1 show ID`: one stored evaluation in full: the whole reason, where the time went, every
//! check, the timing, findings and the program's own output (its traceback or compiler output).

use crate::args::ShowArgs;
use crate::exit::Status;
use crate::out;
use crate::record;
use crate::report;
use crate::workspace::open_existing;
use anyhow::{anyhow, Context, Result};

pub fn run(a: &ShowArgs) -> Result<Status> {
    let store = open_existing(&a.db.db)?;
    let stored = store.evaluation(a.id)?.ok_or_else(|| {
        anyhow!(
            "`{}` holds no evaluation {}\nhint: ids are in the `id` column of `cudal1 eval`'s table and the `id` of its `--json` rows; `cudal1 export` lists them all",
            a.db.db.display(),
            a.id
        )
    })?;
    if a.json {
        out::line(serde_json::to_string_pretty(&record::stored_json(&stored))?)?;
        return Ok(Status::Done);
    }
    let e = record::from_store(&stored, &stored.task_name, &stored.candidate_label)
        .with_context(|| format!("evaluation {} of `{}` was stored by another version of cudal1; `--json` shows it as stored", a.id, a.db.db.display()))?;
    report::print_single(&e, Some(stored.id))?;
    out::line(format!(
        "recorded:   {}{}",
        stored.created_at,
        stored.batch_id.as_deref().map(|b| format!(" (batch {b})")).unwrap_or_default()
    ))?;
    out::line(format!("task file:  {}", report::short_label(&stored.task_path)))?;
    out::line(format!("judged by:  {}", record::judge_line(&stored)))?;
    if let Some(own) = record::own_share_line(&stored) {
        out::line(format!("own kernels: {own}"))?;
    }
    report::print_details(&e)?;
    Ok(Status::Done)
}
