//! The rules every state file keeps, whoever wrote it: the values against
//! the file's layout and against each other.

use super::format::StateFile;

impl StateFile {
    /// Checks the values against the file's layout and against each other,
    /// so that nothing read from a file can make a generator resume early or
    /// make its arithmetic overflow. The rules are those of the
    /// [`state`](crate::state) module, *The state file*; repeated or
    /// out-of-range clock values in `high_water` are refused when parsing.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        let layout = &self.layout;
        let in_range = |what: &str, second: u64| {
            if (layout.epoch()..=layout.last_unix_second()).contains(&second) {
                Ok(())
            } else {
                Err(format!("{what} is outside the layout's range of seconds"))
            }
        };
        if self.shard > layout.max_shard() {
            return Err("the shard does not fit the layout".into());
        }
        if self
            .clock_id
            .checked_add(u64::from(layout.clock_values()))
            .is_none()
        {
            return Err("clock_id is too large to be bumped".into());
        }
        in_range("seen_max", self.seen_max)?;
        in_range("seen_last_run", self.seen_last_run)?;
        if self.seen_last_run > self.seen_max {
            return Err("seen_last_run is above seen_max".into());
        }
        for (&value, &mark) in &self.high_water {
            if value >= layout.clock_values() {
                return Err("a high_water clock value does not fit the layout".into());
            }
            in_range(&format!("the high_water mark of clock value {value}"), mark)?;
        }
        let value = self.clock_value();
        let Some(&current) = self.high_water.get(&value) else {
            return Err(format!(
                "high_water has no mark for the current clock value {value}"
            ));
        };
        if current < self.seen_last_run {
            return Err(format!(
                "the high_water mark of clock value {value} is below seen_last_run"
            ));
        }
        if let Some((second, sequence)) = self.last {
            in_range("the last issued second", second)?;
            if sequence > layout.max_sequence() {
                return Err("the last issued sequence does not fit the layout".into());
            }
            if current < second {
                return Err(format!(
                    "the high_water mark of clock value {value} is below the last issued second"
                ));
            }
        }
        if self.high_water.values().all(|&mark| mark < self.seen_max) {
            return Err("every high_water mark is below seen_max".into());
        }
        if let Some((first, last)) = self.skip {
            in_range("the first skipped second", first)?;
            in_range("the last skipped second", last)?;
            if first > last {
                return Err("the skipped seconds end before they start".into());
            }
            // What a generator resumes after lies before the skipped
            // seconds; past them, the line is dropped.
            if self.high_water.values().any(|&mark| mark >= first) {
                return Err("a high_water mark is not below the skipped seconds".into());
            }
        }
        Ok(())
    }
}
