//! The loads a server starts with: every model the control mode asks for, in parallel (ensembles
//! after their steps), their failures logged once per reason and returned for `--exit-on-error`.
//! The backends' slow preparations (model.py builds) run as many at once as the backends say
//! ([`crate::backend::Backend::preparations_at_once`]), ahead of the model-load threads.

use std::sync::Arc;

use super::scan::{mentions_ensemble, valid_name};
use super::{ControlMode, ModelManager};

impl ModelManager {
    /// Loads the models the control mode asks for at startup. Returns the failures, so the
    /// caller can honour `--exit-on-error`; models whose backend this binary was built without
    /// are not among them (they stay unavailable with that reason, and a warning names them).
    pub async fn load_startup_models(self: &Arc<Self>, explicit: &[String]) -> Vec<(String, String)> {
        let names: Vec<String> = match self.options.control_mode {
            ControlMode::Explicit if !explicit.iter().any(|n| n == "*") => explicit.to_vec(),
            _ => self.scan().into_keys().collect(),
        };
        let mut failures = Vec::new();
        let (names, invalid): (Vec<String>, Vec<String>) = names.into_iter().partition(|n| valid_name(n));
        for name in invalid {
            failures.push((name.clone(), format!("invalid model name '{name}'")));
        }
        // A model named at startup that no repository holds: Triton's line, and no load.
        let (names, missing): (Vec<String>, Vec<String>) = names.into_iter().partition(|n| !self.dirs_of(n).is_empty());
        for name in missing {
            let reason = format!("failed to poll model '{name}': model not found in any model repository.");
            tracing::error!("{reason}");
            failures.push((name, reason));
        }
        // Models that are not ensembles load in parallel (as Triton's model load threads do);
        // ensembles after them, one by one, each after the composing models it needs.
        let (ensembles, plain): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|name| self.locate(name).is_ok_and(|dir| mentions_ensemble(&dir)));
        if let Ok(mut startup) = self.startup_failures.lock() {
            *startup = Some(Default::default());
        }
        let threads = match self.options.load_threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        {
            use futures_util::StreamExt;
            let _guard = self.control.lock().await;
            // Two stages: the backends' slow preparations (model.py builds, as many at once as
            // the backends run: one per CPU for builds) run ahead of the model-load threads, which
            // take each model as its preparation ends. A preparation needs no lock, and no door
            // is open yet.
            let ahead = self.backends.preparations_at_once();
            let (prepared_tx, prepared_rx) = tokio::sync::mpsc::unbounded_channel();
            let prepare = futures_util::stream::iter(plain)
                .map(|name| async move {
                    let outcome = self.prepare_builds(&name).await;
                    (name, outcome)
                })
                .buffer_unordered(ahead)
                .for_each(move |prepared| {
                    let _ = prepared_tx.send(prepared);
                    std::future::ready(())
                });
            let load = tokio_stream::wrappers::UnboundedReceiverStream::new(prepared_rx)
                .map(|(name, prepared)| async move {
                    let outcome = match prepared {
                        Ok(()) => self.load_one(&name, None, None).await,
                        Err(e) => Err(e),
                    };
                    (name, outcome)
                })
                .buffer_unordered(threads)
                .collect::<Vec<_>>();
            let ((), loads) = futures_util::future::join(prepare, load).await;
            for (name, outcome) in loads {
                if let Err(e) = outcome {
                    failures.push((name, e.message));
                }
            }
        }
        self.refresh_ensembles(None);
        for name in ensembles {
            // Already loaded in this pass as an ensemble's composing model.
            if self.models.read().is_ok_and(|m| m.contains_key(&name)) {
                continue;
            }
            if let Err(e) = self.load(&name, None).await {
                failures.push((name, e.message));
            }
        }
        self.flush_failures();
        if self.options.ensembles_wait_for_registered {
            failures.retain(|(name, _)| match self.awaited_steps(name) {
                Some(steps) => {
                    tracing::info!(
                        model = name.as_str(),
                        "ensemble waits for {} (in no model repository): it turns ready once they are registered",
                        steps.join(", ")
                    );
                    false
                }
                None => true,
            });
        }
        failures.sort();
        let mut left_out = Vec::new();
        let mut reason = None;
        failures.retain(|(name, _)| match self.missing_from_build(name) {
            Some(why) => {
                left_out.push(name.clone());
                reason.get_or_insert(why);
                false
            }
            None => true,
        });
        if let Some(reason) = reason {
            tracing::warn!(
                "{} model(s) need a backend this binary was built without and stay unavailable, serving the \
                 rest: {} ({reason})",
                left_out.len(),
                left_out.join(", ")
            );
        }
        failures
    }

    /// Logs a load failure, unless the previous one failed the same way: those are counted, and
    /// the count is logged with the next different failure or [`Self::flush_failures`].
    pub(super) fn log_failure(&self, name: &str, message: &str) {
        if let Ok(mut startup) = self.startup_failures.lock()
            && let Some(last) = startup.as_mut()
        {
            let reason = message.replace(&format!("'{name}'"), "'<model>'").replace(&format!("/{name}/"), "/<model>/");
            if last.0 == reason {
                last.1 += 1;
                tracing::debug!(model = name, "failed to load model: {message}");
                return;
            }
            log_repeats(last);
            *last = (reason, 0);
        }
        tracing::error!(model = name, "failed to load model: {message}");
    }

    /// Logs how many startup loads repeated the last failure, and stops counting repeats.
    pub(super) fn flush_failures(&self) {
        if let Ok(mut startup) = self.startup_failures.lock()
            && let Some(last) = startup.take()
        {
            log_repeats(&last);
        }
    }

    /// For an ensemble that failed only because some steps are in no repository (nor loaded):
    /// those steps. `None` for any other model or failure.
    /// A step that is itself an ensemble waiting for such steps is awaited too.
    fn awaited_steps(&self, name: &str) -> Option<Vec<String>> {
        self.awaited_steps_within(name, &mut Vec::new())
    }

    fn awaited_steps_within(&self, name: &str, seen: &mut Vec<String>) -> Option<Vec<String>> {
        if seen.iter().any(|s| s == name) {
            return None;
        }
        seen.push(name.to_string());
        let config = self.models.read().ok()?.get(name)?.ensemble.as_ref()?.config.clone();
        let mut missing = Vec::new();
        for step in crate::scheduler::ensemble::plan::composing_models(&config) {
            let known = self.models.read().is_ok_and(|m| m.contains_key(&step));
            if !known && self.locate(&step).is_err() {
                missing.push(step);
            } else if known && let Some(inner) = self.awaited_steps_within(&step, seen) {
                missing.extend(inner);
            }
        }
        (!missing.is_empty()).then_some(missing)
    }
}

/// How many loads repeated a logged failure, if any did.
fn log_repeats(last: &(String, usize)) {
    if last.1 > 0 {
        tracing::error!("{} more model(s) failed to load the same way: {}", last.1, last.0);
    }
}
