//! The explorer the protocol models run on: every state reachable within a
//! number of steps, breadth first, each checked against the model's
//! invariant; the first violation comes with the shortest trace to it.
//!
//! Written here rather than taken from a model-checking crate: a model is
//! a handful of plain functions over a small state (the protocol's steps
//! call the code's own rules where they are public), breadth-first order
//! makes every counterexample a shortest one, and the whole check builds
//! in a second beside the workspace's dependencies.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A fast hash for the states seen (no defence against chosen keys is
/// needed here): a word at a time, multiplied and rotated.
#[derive(Default)]
struct Fast(u64);

impl Hasher for Fast {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Seen<S> = HashMap<S, usize, BuildHasherDefault<Fast>>;

/// A protocol as a state machine.
pub trait Model {
    type State: Clone + Eq + Hash + Debug;
    type Action: Clone + Debug + PartialEq;

    /// The states it starts in.
    fn init(&self) -> Vec<Self::State>;

    /// Every step `state` allows, each with the state it leads to.
    fn steps(&self, state: &Self::State, out: &mut Vec<(Self::Action, Self::State)>);

    /// `Err(why)` if `state` breaks the invariant.
    fn check(&self, state: &Self::State) -> Result<(), String>;
}

/// A state that breaks the invariant, the steps to it from a start, and why.
#[derive(Debug)]
pub struct Counterexample<M: Model> {
    pub why: String,
    pub start: M::State,
    pub trace: Vec<(M::Action, M::State)>,
}

impl<M: Model> Counterexample<M> {
    /// The steps, one a line.
    pub fn steps(&self) -> String {
        self.trace
            .iter()
            .enumerate()
            .map(|(i, (action, _))| format!("{:>3}. {action:?}\n", i + 1))
            .collect()
    }
}

/// What an exploration found.
#[derive(Debug)]
pub struct Outcome<M: Model> {
    /// Distinct states reached.
    pub states: usize,
    /// The deepest level explored.
    pub depth: usize,
    /// Whether states at the depth bound had steps left unexplored (the
    /// bound, not the model, ended the search).
    pub bounded: bool,
    pub violation: Option<Counterexample<M>>,
}

/// Explores `model` breadth first to `max_depth` steps, stopping at the
/// first state that breaks the invariant.
pub fn explore<M: Model>(model: &M, max_depth: usize) -> Outcome<M> {
    // Each state is kept once, as the key; a node keeps its parent's
    // index and the step from it, and a trace is replayed from its start.
    let mut seen: Seen<M::State> = Seen::default();
    let mut nodes: Vec<Option<(usize, M::Action)>> = Vec::new();
    let mut frontier: Vec<(usize, M::State)> = Vec::new();
    // The distinct starts, numbered as their nodes (first).
    let mut starts: Vec<M::State> = Vec::new();
    for state in model.init() {
        if seen.contains_key(&state) {
            continue;
        }
        seen.insert(state.clone(), nodes.len());
        frontier.push((nodes.len(), state.clone()));
        nodes.push(None);
        starts.push(state);
    }
    let found = |nodes: &Vec<Option<(usize, M::Action)>>, mut at: usize, why: String| {
        let mut actions = Vec::new();
        while let Some((parent, action)) = &nodes[at] {
            actions.push(action.clone());
            at = *parent;
        }
        actions.reverse();
        let start = starts[at].clone();
        let mut state = start.clone();
        let mut trace = Vec::new();
        let mut steps = Vec::new();
        for action in actions {
            steps.clear();
            model.steps(&state, &mut steps);
            let (_, next) = steps
                .drain(..)
                .find(|(a, _)| *a == action)
                .expect("a recorded step replays");
            state = next.clone();
            trace.push((action, next));
        }
        Counterexample { why, start, trace }
    };
    for (i, state) in &frontier {
        if let Err(why) = model.check(state) {
            return Outcome {
                states: nodes.len(),
                depth: 0,
                bounded: false,
                violation: Some(found(&nodes, *i, why)),
            };
        }
    }
    let mut depth = 0;
    let mut bounded = false;
    let mut steps = Vec::new();
    while !frontier.is_empty() {
        if depth == max_depth {
            bounded = frontier.iter().any(|(_, state)| {
                steps.clear();
                model.steps(state, &mut steps);
                steps.iter().any(|(_, next)| !seen.contains_key(next))
            });
            break;
        }
        depth += 1;
        let mut next_frontier = Vec::new();
        for (i, state) in &frontier {
            steps.clear();
            model.steps(state, &mut steps);
            for (action, next) in steps.drain(..) {
                if seen.contains_key(&next) {
                    continue;
                }
                let at = nodes.len();
                seen.insert(next.clone(), at);
                nodes.push(Some((*i, action)));
                if let Err(why) = model.check(&next) {
                    return Outcome {
                        states: nodes.len(),
                        depth,
                        bounded: false,
                        violation: Some(found(&nodes, at, why)),
                    };
                }
                next_frontier.push((at, next));
            }
        }
        frontier = next_frontier;
    }
    Outcome {
        states: nodes.len(),
        depth,
        bounded,
        violation: None,
    }
}

/// The depth bound for a model: `short` in CI, `long` when `IDUTIL_MODELS`
/// is `long` (see the crate's docs).
pub fn depth(short: usize, long: usize) -> usize {
    if long_run() {
        long
    } else {
        short
    }
}

/// Whether the longer bounds were asked for (`IDUTIL_MODELS=long`).
pub fn long_run() -> bool {
    std::env::var("IDUTIL_MODELS").is_ok_and(|v| v == "long")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two counters that may each step up to 3; "both at 2" is the bug.
    struct Toy;

    impl Model for Toy {
        type State = (u8, u8);
        type Action = &'static str;

        fn init(&self) -> Vec<(u8, u8)> {
            vec![(0, 0)]
        }

        fn steps(&self, s: &(u8, u8), out: &mut Vec<(&'static str, (u8, u8))>) {
            if s.0 < 3 {
                out.push(("a", (s.0 + 1, s.1)));
            }
            if s.1 < 3 {
                out.push(("b", (s.0, s.1 + 1)));
            }
        }

        fn check(&self, s: &(u8, u8)) -> Result<(), String> {
            if *s == (2, 2) {
                Err("both at 2".into())
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn finds_the_shortest_counterexample() {
        let out = explore(&Toy, 10);
        let cex = out.violation.expect("the toy's bug");
        assert_eq!(cex.trace.len(), 4);
        assert_eq!(cex.trace.last().unwrap().1, (2, 2));
    }

    #[test]
    fn a_bound_short_of_the_bug_finds_nothing_and_says_so() {
        let out = explore(&Toy, 3);
        assert!(out.violation.is_none());
        assert!(out.bounded);
        assert_eq!(out.depth, 3);
    }
}
