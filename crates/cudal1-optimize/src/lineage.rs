//! The lineage of a program: the exemplars its prompt showed, theirs, and so on back to programs
//! written from the reference alone.

use std::collections::{HashMap, HashSet, VecDeque};

use cudal1_store::StoredProgram;
use serde::Serialize;

use crate::tally::correct_speedup;

/// One ancestor (or the program itself, at depth 0).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineageNode {
    pub id: i64,
    /// Steps from the program: 0 is the program, 1 an exemplar its prompt showed, ...
    pub depth: u32,
    pub round: u32,
    pub run_id: String,
    pub verdict: String,
    pub speedup: Option<f64>,
    /// The exemplars shown when this one was written; empty for a first-round program.
    pub parents: Vec<i64>,
}

/// Breadth-first from `id`: each program once, at its smallest depth, parents in prompt order.
/// A parent missing from `programs` (another settings hash, a pruned store) ends that branch.
pub fn lineage(id: i64, programs: &HashMap<i64, &StoredProgram>) -> Vec<LineageNode> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([(id, 0u32)]);
    while let Some((id, depth)) = queue.pop_front() {
        if !seen.insert(id) {
            continue;
        }
        let Some(p) = programs.get(&id) else { continue };
        queue.extend(p.parent_ids.iter().map(|&parent| (parent, depth + 1)));
        out.push(LineageNode {
            id,
            depth,
            round: p.round,
            run_id: p.run_id.clone(),
            verdict: p.verdict.clone(),
            speedup: correct_speedup(p).or(p.speedup_median),
            parents: p.parent_ids.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::tests::program;

    #[test]
    fn ancestors_come_once_each_nearest_first() {
        let mut ps = [
            program(1, "a", 1, "correct", Some(1.1)),
            program(2, "b", 1, "correct", Some(1.5)),
            program(3, "c", 2, "correct", Some(2.0)),
            program(4, "d", 3, "correct", Some(3.0)),
        ];
        ps[2].parent_ids = vec![1, 2];
        // 4 was shown 3 and 1; 1 is reached twice but listed once, at depth 1.
        ps[3].parent_ids = vec![3, 1, 99];
        let by_id: HashMap<i64, &StoredProgram> = ps.iter().map(|p| (p.id, p)).collect();
        let got: Vec<(i64, u32)> = lineage(4, &by_id).iter().map(|n| (n.id, n.depth)).collect();
        assert_eq!(got, vec![(4, 0), (3, 1), (1, 1), (2, 2)]);
        assert_eq!(lineage(4, &by_id)[0].parents, vec![3, 1, 99]);
        assert!(lineage(42, &by_id).is_empty());
    }
}
