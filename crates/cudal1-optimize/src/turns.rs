//! Trajectories (`optimize --turns K`): each sample slot of a round is a trajectory of up to K
//! programs, where turn t+1's prompt shows turn t's program with its verdict. Which trajectories
//! of a round need another turn is a pure function of the stored samples and programs, so an
//! interrupted run continues each trajectory from its last stored turn.

use std::collections::BTreeMap;

use cudal1_store::{StoredProgram, StoredSample};

use crate::tally::{correct_speedup, program_of, Outcome, ProgramIndex};

/// The id a trajectory's programs record: the run's sample slot.
pub fn trajectory_id(run_id: &str, round: u32, index: u32) -> String {
    format!("{run_id}/{round}/{index}")
}

/// A trajectory's next request.
#[derive(Debug, Clone, PartialEq)]
pub struct NextTurn {
    pub index: u32,
    /// The 1-based turn to request (above 1).
    pub turn: u32,
    /// The exemplars its first turn showed: every turn of a trajectory shows the same ones.
    pub exemplar_ids: Vec<i64>,
    /// The turn before it, and its program when the reply held one.
    pub previous: StoredSample,
    pub previous_program: Option<StoredProgram>,
}

/// Why a trajectory asks for no further turn (or that it does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrajectoryState {
    /// Its last turn is correct with at least the target speedup.
    Reached,
    /// It has `turns` turns.
    Exhausted,
    /// Its first request failed: the slot is replaced by a new one, as without turns.
    Failed,
    /// Its last program has no verdict yet (evaluated again first).
    Pending,
    /// It needs another turn.
    Continues,
}

/// Each trajectory of round `round` with its state and, when it continues, its next request.
pub fn trajectories(
    round: u32,
    samples: &[StoredSample],
    programs: &ProgramIndex,
    turns: u32,
    target: f64,
) -> Vec<(u32, TrajectoryState, Option<NextTurn>)> {
    let mut slots: BTreeMap<u32, Vec<&StoredSample>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.sample.round == round) {
        slots.entry(s.sample.index).or_default().push(s);
    }
    slots
        .into_iter()
        .map(|(index, mut turns_of)| {
            turns_of.sort_by_key(|s| s.sample.turn);
            let (state, next) = state_of(&turns_of, programs, turns, target);
            (index, state, next)
        })
        .collect()
}

/// The requests the round's trajectories need now.
pub fn next_turns(
    round: u32,
    samples: &[StoredSample],
    programs: &ProgramIndex,
    turns: u32,
    target: f64,
) -> Vec<NextTurn> {
    if turns <= 1 {
        return Vec::new();
    }
    trajectories(round, samples, programs, turns, target)
        .into_iter()
        .filter_map(|(_, _, next)| next)
        .collect()
}

fn state_of(
    slot: &[&StoredSample],
    programs: &ProgramIndex,
    turns: u32,
    target: f64,
) -> (TrajectoryState, Option<NextTurn>) {
    let last = slot.last().expect("a slot has a sample");
    let first = slot[0];
    let next = |turn: u32, previous: &StoredSample| NextTurn {
        index: last.sample.index,
        turn,
        exemplar_ids: first.sample.exemplar_ids.clone(),
        previous: previous.clone(),
        previous_program: program_of(previous, programs).cloned(),
    };
    let n = last.sample.turn;
    if last.sample.outcome == Outcome::LlmError.as_str() {
        // A later turn's failed request is sent again in its place; the turn before it is the
        // one the prompt shows.
        return match slot.iter().rev().find(|s| s.sample.turn + 1 == n) {
            Some(previous) if n > 1 => (TrajectoryState::Continues, Some(next(n, previous))),
            _ => (TrajectoryState::Failed, None),
        };
    }
    if last.sample.outcome == Outcome::Program.as_str() {
        let Some(program) = program_of(last, programs) else {
            return (TrajectoryState::Pending, None);
        };
        if correct_speedup(program).is_some_and(|s| s >= target) {
            return (TrajectoryState::Reached, None);
        }
    }
    if n >= turns {
        return (TrajectoryState::Exhausted, None);
    }
    (TrajectoryState::Continues, Some(next(n + 1, last)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::index_programs;
    use crate::tally::tests::{program, sample};

    fn at(index: u32, turn: u32, outcome: Outcome, hash: Option<&str>) -> StoredSample {
        let mut s = sample(1, index, outcome, hash);
        s.sample.turn = turn;
        s.id = i64::from(index * 10 + turn);
        if turn == 1 {
            s.sample.exemplar_ids = vec![40, 41];
        }
        s
    }

    #[test]
    fn each_trajectory_continues_from_its_last_turn_until_it_is_good_enough_or_has_k_turns() {
        let programs = index_programs(vec![
            program(1, "broken", 1, "compile_error", None),
            program(2, "wrong", 1, "incorrect", None),
            program(3, "fast", 1, "correct", Some(1.5)),
            program(4, "slow", 1, "correct", Some(0.8)),
        ]);
        let samples = vec![
            // 0: compile error, then wrong: turn 3 next, showing turn 2.
            at(0, 1, Outcome::Program, Some("broken")),
            at(0, 2, Outcome::Program, Some("wrong")),
            // 1: fast enough at turn 1: done.
            at(1, 1, Outcome::Program, Some("fast")),
            // 2: correct but slow, three turns: done.
            at(2, 1, Outcome::Program, Some("slow")),
            at(2, 2, Outcome::Program, Some("slow")),
            at(2, 3, Outcome::Program, Some("slow")),
            // 3: no code: turn 2 next.
            at(3, 1, Outcome::NoCode, None),
            // 4: evaluation still pending.
            at(4, 1, Outcome::Program, Some("unknown")),
            // 5: first request failed: replaced by a new slot, not continued.
            at(5, 1, Outcome::LlmError, None),
            // 6: turn 2's request failed: turn 2 again, showing turn 1.
            at(6, 1, Outcome::Program, Some("slow")),
            at(6, 2, Outcome::LlmError, None),
        ];
        let states: Vec<(u32, TrajectoryState)> = trajectories(1, &samples, &programs, 3, 1.0)
            .into_iter()
            .map(|(i, s, _)| (i, s))
            .collect();
        use TrajectoryState::*;
        assert_eq!(
            states,
            [
                (0, Continues),
                (1, Reached),
                (2, Exhausted),
                (3, Continues),
                (4, Pending),
                (5, Failed),
                (6, Continues)
            ]
        );
        let next = next_turns(1, &samples, &programs, 3, 1.0);
        let brief: Vec<(u32, u32, i64, Option<i64>)> = next
            .iter()
            .map(|n| (n.index, n.turn, n.previous.id, n.previous_program.as_ref().map(|p| p.id)))
            .collect();
        assert_eq!(brief, [(0, 3, 2, Some(2)), (3, 2, 31, None), (6, 2, 61, Some(4))]);
        assert!(
            next.iter().all(|n| n.exemplar_ids == [40, 41]),
            "every turn shows the first turn's exemplars"
        );
        // A higher target keeps the fast one going; one turn means no trajectory goes on.
        assert!(next_turns(1, &samples, &programs, 3, 2.0)
            .iter()
            .any(|n| n.index == 1 && n.turn == 2));
        assert!(next_turns(1, &samples, &programs, 1, 1.0).is_empty());
        assert!(
            next_turns(2, &samples, &programs, 3, 1.0).is_empty(),
            "another round's slots are its own"
        );
    }

    #[test]
    fn trajectory_ids_name_the_slot() {
        assert_eq!(trajectory_id("abc", 2, 5), "abc/2/5");
    }
}
