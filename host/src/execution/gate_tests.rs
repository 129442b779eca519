use super::*;

const SHORT: Duration = Duration::from_micros(20);
const AMBIGUOUS: Duration = Duration::from_micros(1_000);
const LONG: Duration = Duration::from_millis(50);

fn opened_after(gate: &InlineGate, short_runs: u32) -> bool {
    for _ in 0..short_runs {
        gate.record(SHORT, false);
    }
    gate.open()
}

#[test]
fn the_inline_gate_opens_after_a_streak_of_short_executions() {
    let gate = InlineGate::new();
    assert!(!opened_after(&gate, FIRST_STREAK - 1), "open before the streak");
    assert!(opened_after(&gate, 1));
}

#[test]
fn an_interpreted_guests_few_hundred_microseconds_open_the_gate() {
    // An interpreted guest's add_sub runs a few hundred µs handed off: a bound below that
    // would keep it on hand-offs for good.
    let gate = InlineGate::new();
    for _ in 0..FIRST_STREAK {
        gate.record(Duration::from_micros(300), false);
    }
    assert!(gate.open(), "300 µs executions stay on hand-offs");
    for _ in 0..AMBIGUOUS_IN_A_ROW {
        gate.record(Duration::from_micros(450), true);
    }
    assert!(gate.open(), "450 µs inline executions close the gate");
}

#[test]
fn a_long_inline_execution_closes_the_gate_and_doubles_the_streak_needed() {
    let gate = InlineGate::new();
    assert!(opened_after(&gate, FIRST_STREAK));
    gate.record(LONG, true);
    assert!(!gate.open(), "a guest looping to its limit keeps running inline");
    assert!(!opened_after(&gate, 2 * FIRST_STREAK - 1));
    assert!(opened_after(&gate, 1));
    // A long run that was handed off closes the gate but costs no longer streak.
    gate.record(LONG, false);
    assert!(!opened_after(&gate, 2 * FIRST_STREAK - 1));
    assert!(opened_after(&gate, 1));
}

#[test]
fn the_longer_streak_decays_after_a_well_behaved_stretch() {
    let gate = InlineGate::new();
    assert!(opened_after(&gate, FIRST_STREAK));
    // A preempted short run: past LONG_EXECUTION, short of HELD_LONG.
    gate.record(LONG_EXECUTION + Duration::from_millis(1), true);
    assert!(!opened_after(&gate, 2 * FIRST_STREAK - 1));
    assert!(opened_after(&gate, 1));
    assert_eq!(gate.needed.load(Ordering::Relaxed), 2 * FIRST_STREAK);
    opened_after(&gate, 2 * FIRST_STREAK * DECAY_FACTOR);
    assert_eq!(gate.needed.load(Ordering::Relaxed), FIRST_STREAK, "the streak needed came back down");
    assert!(gate.open(), "halving the streak needed must not close the gate");
    gate.record(LONG_EXECUTION + Duration::from_millis(1), true);
    assert!(!opened_after(&gate, 2 * FIRST_STREAK - 1), "a later preemption doubles from the decayed value");
    assert!(opened_after(&gate, 1));
}

#[test]
fn a_model_that_held_a_thread_longer_than_any_preemption_does_not_decay_for_a_while() {
    let gate = InlineGate::new();
    assert!(opened_after(&gate, FIRST_STREAK));
    gate.record(HELD_LONG + Duration::from_millis(1), true);
    assert!(gate.held_long_recently());
    opened_after(&gate, 100 * FIRST_STREAK * DECAY_FACTOR);
    assert_eq!(gate.needed.load(Ordering::Relaxed), 2 * FIRST_STREAK, "a looping guest's streak decayed");
}

#[test]
fn executions_a_little_long_close_the_gate_only_several_in_a_row() {
    let gate = InlineGate::new();
    assert!(opened_after(&gate, FIRST_STREAK));
    for _ in 0..AMBIGUOUS_IN_A_ROW - 1 {
        gate.record(AMBIGUOUS, true);
    }
    assert!(gate.open(), "a preempted short run closed the gate");
    gate.record(SHORT, true); // a short run in between starts the count again
    for _ in 0..AMBIGUOUS_IN_A_ROW - 1 {
        gate.record(AMBIGUOUS, true);
    }
    assert!(gate.open());
    gate.record(AMBIGUOUS, true);
    assert!(!gate.open(), "{AMBIGUOUS_IN_A_ROW} ambiguous runs in a row left the gate open");
}
