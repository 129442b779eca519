//! Models that depend on models: an ensemble's composing models load before it, cycles between
//! ensembles are refused, and an ensemble is ready exactly while all of its steps are.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use super::{ModelEntry, ModelManager, VersionState, lookup};
use crate::config::{self, ModelConfig, pb};
use crate::error::{CoreError, CoreResult};
use crate::infer::Infer;
use crate::model::LoadedModel;
use crate::scheduler::ensemble::{EnsemblePlan, EnsembleScheduler, StepCatalog, composing_models};

/// What an ensemble's versions are rebuilt from.
#[derive(Clone)]
pub(super) struct EnsembleSource {
    pub(super) config: ModelConfig,
    pub(super) dir: PathBuf,
}

/// The loaded models, as ensembles see their steps.
struct Catalog<'a>(&'a BTreeMap<String, ModelEntry>);

impl StepCatalog for Catalog<'_> {
    fn step_config(&self, model: &str, version: Option<i64>) -> Option<ModelConfig> {
        lookup(self.0, model, version).ok().map(|m| m.config.clone())
    }
}

/// The composing models a model directory's config names, when it is an ensemble (read from
/// disk, or from the load request's config override).
fn ensemble_dependencies(dir: &Path, config_override: Option<&str>) -> Vec<String> {
    let parsed = match config_override {
        Some(json) => config::parse_json(json).ok(),
        None => std::fs::read_to_string(dir.join("config.pbtxt"))
            .ok()
            .and_then(|text| config::parse_pbtxt(&text, &dir.join("config.pbtxt")).ok()),
    };
    parsed.filter(crate::scheduler::ensemble::is_ensemble).map(|c| composing_models(&c)).unwrap_or_default()
}

impl ModelManager {
    /// Why `name` cannot load in this binary whatever its files say: its backend, or for an
    /// ensemble a composing model's at any depth, was left out of the build
    /// ([`crate::backend::Backend::missing_from_build`]).
    pub(super) fn missing_from_build(&self, name: &str) -> Option<String> {
        self.missing_from_build_within(name, &mut Vec::new())
    }

    fn missing_from_build_within(&self, name: &str, seen: &mut Vec<String>) -> Option<String> {
        if seen.iter().any(|s| s == name) {
            return None; // a cycle, reported as such by the load
        }
        seen.push(name.to_string());
        let path = self.locate(name).ok()?.join("config.pbtxt");
        let config = config::parse_pbtxt(&std::fs::read_to_string(&path).ok()?, &path).ok()?;
        if crate::scheduler::ensemble::is_ensemble(&config) {
            return composing_models(&config).iter().find_map(|step| self.missing_from_build_within(step, seen));
        }
        self.backends.resolve(&config, None).ok()?.missing_from_build().map(str::to_string)
    }

    fn weak_infer(self: &Arc<Self>) -> Weak<dyn Infer> {
        let strong: Arc<dyn Infer> = Arc::clone(self) as Arc<dyn Infer>;
        Arc::downgrade(&strong)
    }

    fn is_loaded(&self, name: &str) -> bool {
        self.models.read().is_ok_and(|m| m.get(name).is_some_and(|e| e.state.is_loaded()))
    }

    /// The composing models (recursively: ensembles of ensembles) that must load before `name`,
    /// dependencies first, in `order`. A cycle between ensembles is an error, in Triton's words.
    pub(super) fn missing_dependencies(
        &self,
        name: &str,
        dir: &Path,
        config_override: Option<&str>,
        order: &mut Vec<String>,
    ) -> CoreResult<()> {
        fn visit(
            manager: &ModelManager,
            name: &str,
            dependencies: Vec<String>,
            chain: &mut Vec<String>,
            order: &mut Vec<String>,
        ) -> CoreResult<()> {
            chain.push(name.to_string());
            for dependency in dependencies {
                if chain.contains(&dependency) {
                    // Triton's words: the ensemble, "...", the one that leads back to it.
                    let last = chain.last().map_or("", String::as_str);
                    return Err(CoreError::invalid_arg(format!(
                        "circular dependency between ensembles: {dependency} -> ... -> {last} -> {dependency}"
                    )));
                }
                if order.contains(&dependency) {
                    continue;
                }
                let Ok(dir) = manager.locate(&dependency) else { continue };
                let nested = ensemble_dependencies(&dir, None);
                visit(manager, &dependency, nested, chain, order)?;
                if !manager.is_loaded(&dependency) {
                    order.push(dependency);
                }
            }
            chain.pop();
            Ok(())
        }
        let dependencies = ensemble_dependencies(dir, config_override);
        visit(self, name, dependencies, &mut Vec::new(), order)
    }

    /// The composing models of ensemble `name` (through nested ensembles too) that were loaded only
    /// as dependencies and that no other loaded ensemble uses: what `unload_dependents` removes
    /// with it.
    pub(super) fn unneeded_dependencies(&self, name: &str) -> Vec<String> {
        let Ok(models) = self.models.read() else { return Vec::new() };
        let steps_of = |model: &str| {
            models.get(model).and_then(|e| e.ensemble.as_ref()).map(|s| composing_models(&s.config)).unwrap_or_default()
        };
        let mut going: BTreeSet<String> = BTreeSet::from([name.to_string()]);
        let mut found = Vec::new();
        let mut frontier = steps_of(name);
        while let Some(model) = frontier.pop() {
            let Some(entry) = models.get(&model) else { continue };
            if !entry.as_dependency || entry.state.is_unloaded() || going.contains(&model) {
                continue;
            }
            // Another loaded ensemble, not itself going away, still uses it.
            let used_elsewhere = models.iter().any(|(other, e)| {
                !e.state.is_unloaded()
                    && !going.contains(other)
                    && e.ensemble.is_some()
                    && steps_of(other).contains(&model)
            });
            if used_elsewhere {
                continue;
            }
            going.insert(model.clone());
            frontier.extend(steps_of(&model));
            found.push(model);
        }
        found
    }

    /// Ensembles that use `name`, directly or through other ensembles.
    pub(super) fn dependents(&self, name: &str) -> Vec<String> {
        let Ok(models) = self.models.read() else { return Vec::new() };
        let uses: Vec<(String, Vec<String>)> = models
            .iter()
            .filter_map(|(n, e)| e.ensemble.as_ref().map(|s| (n.clone(), composing_models(&s.config))))
            .collect();
        let mut found: BTreeSet<String> = BTreeSet::new();
        let mut frontier = vec![name.to_string()];
        while let Some(model) = frontier.pop() {
            for (ensemble, steps) in &uses {
                if steps.contains(&model) && found.insert(ensemble.clone()) {
                    frontier.push(ensemble.clone());
                }
            }
        }
        found.into_iter().collect()
    }

    /// One version of an ensemble, checked against the models loaded now.
    pub(super) fn build_ensemble(self: &Arc<Self>, source: &EnsembleSource, version: i64) -> VersionState {
        let plan = match self.models.read() {
            Ok(models) => EnsemblePlan::new(&source.config, &Catalog(&models)),
            Err(_) => Err(CoreError::internal("model table poisoned")),
        };
        let built = plan.and_then(|plan| {
            let mut config = source.config.clone();
            if plan.decoupled {
                // Reaching a decoupled model makes the ensemble decoupled (and /config says so).
                config.model_transaction_policy = Some(pb::ModelTransactionPolicy { decoupled: true });
            }
            let scheduler = EnsembleScheduler::new(plan, self.weak_infer());
            LoadedModel::load_ensemble(config, version, scheduler, &source.dir, &self.options.model_settings)
        });
        match built {
            Ok(model) => VersionState::Ready(Arc::new(model)),
            Err(e) => VersionState::Unavailable(e.message),
        }
    }

    /// Brings every ensemble's readiness in line with its steps: one whose step went away becomes
    /// unavailable, one whose steps are all back becomes ready, and one using `changed` (just
    /// loaded) is checked again against the new version. Inner ensembles are settled first.
    pub(super) fn refresh_ensembles(self: &Arc<Self>, changed: Option<&str>) {
        let ensembles: Vec<(String, EnsembleSource, Vec<i64>)> = match self.models.read() {
            Ok(models) => models
                .iter()
                .filter(|(_, e)| e.state.is_loaded())
                .filter_map(|(n, e)| e.ensemble.clone().map(|s| (n.clone(), s, e.versions.keys().copied().collect())))
                .collect(),
            Err(_) => return,
        };
        let stale: BTreeSet<String> = changed.map(|c| self.dependents(c).into_iter().collect()).unwrap_or_default();
        // Dependencies first: an ensemble comes after every ensemble it uses.
        let mut settled: BTreeSet<String> = BTreeSet::new();
        let mut pending = ensembles;
        while !pending.is_empty() {
            let position = pending
                .iter()
                .position(|(_, s, _)| {
                    composing_models(&s.config).iter().all(|m| settled.contains(m) || !self.is_ensemble_entry(m))
                })
                .unwrap_or(0);
            let (name, source, versions) = pending.remove(position);
            for version in versions {
                let (ready, steps_ready) = match self.models.read() {
                    Ok(models) => {
                        let ready = models
                            .get(&name)
                            .and_then(|e| e.versions.get(&version))
                            .is_some_and(|s| s.ready().is_some());
                        let catalog = Catalog(&models);
                        let steps =
                            crate::scheduler::ensemble::plan::ensemble_steps(&source.config).unwrap_or_default();
                        let steps_ready = steps.iter().all(|s| {
                            catalog
                                .step_config(&s.model_name, (s.model_version >= 0).then_some(s.model_version))
                                .is_some()
                        });
                        (ready, steps_ready)
                    }
                    Err(_) => return,
                };
                if ready == steps_ready && !(ready && stale.contains(&name)) {
                    continue;
                }
                let state = self.build_ensemble(&source, version);
                if state.ready().is_some() {
                    tracing::info!(model = name.as_str(), version, "ensemble ready");
                } else {
                    let (_, reason) = state.reported();
                    tracing::warn!(model = name.as_str(), version, "ensemble unavailable: {reason}");
                }
                if let Ok(mut models) = self.models.write()
                    && let Some(entry) = models.get_mut(&name)
                {
                    entry.versions.insert(version, state);
                }
            }
            settled.insert(name);
        }
    }

    fn is_ensemble_entry(&self, name: &str) -> bool {
        self.models.read().is_ok_and(|m| m.get(name).is_some_and(|e| e.ensemble.is_some()))
    }
}
