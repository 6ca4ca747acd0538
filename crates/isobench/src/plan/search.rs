//! The capacity search, apart from how a trial is run: given a function
//! that runs one trial at a rate (with a seed) and says whether it met
//! every SLO while the endpoint kept up, find the highest rate that does.
//!
//! 1. **Bracket**: from the start rate, double while trials pass, or halve
//!    while they fail, until a passing rate lies below a failing one.
//! 2. **Bisect** between them until `upper / lower - 1` is within the
//!    tolerance.
//! 3. **Confirm the boundary**: top the lower end up to `trials` trials,
//!    each with its own seed. It must pass every one; when one fails, the
//!    rate becomes the upper end and the search goes back to 2.
//!
//! The answer is the bracket: every one of `trials` trials at `lower`
//! passed, a trial at `upper` failed, so the capacity, the highest rate
//! sustained reliably, lies between them. (A rate whose trials disagree is
//! not sustained reliably: it is an upper end.) The search stops after
//! `max_trials` trials whatever its state, saying so.

/// What one trial said.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialOutcome {
    pub rate: f64,
    pub seed: u64,
    pub passed: bool,
}

/// The search's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSettings {
    pub start_rate: f64,
    /// Stop bisecting once `upper / lower - 1` is at most this.
    pub tolerance: f64,
    /// Trials at the lower end of the final bracket.
    pub trials: u32,
    pub max_trials: u32,
    /// The first trial's seed; each later trial takes the next one.
    pub seed: u64,
}

/// Where the search ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    /// The highest rate whose every trial passed, below `upper`.
    pub lower: Option<f64>,
    /// The lowest rate at which a trial failed.
    pub upper: Option<f64>,
    /// Confirmed within the tolerance before `max_trials`.
    pub converged: bool,
    pub trials: Vec<TrialOutcome>,
}

/// Rates below this are not tried: nothing meets the SLOs.
const LOWEST_RATE: f64 = 1e-3;
/// Rates above this are not tried: the endpoint never saturated.
const HIGHEST_RATE: f64 = 1e6;

/// Runs the search; `trial(rate, seed)` runs one trial.
pub async fn search<F, Fut>(settings: SearchSettings, mut trial: F) -> anyhow::Result<SearchResult>
where
    F: FnMut(f64, u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let mut trials: Vec<TrialOutcome> = Vec::new();
    let mut converged = false;
    while (trials.len() as u32) < settings.max_trials {
        let (lower, upper) = bracket(&trials);
        let next = match (lower, upper) {
            (None, None) => settings.start_rate,
            (Some(lower), None) => lower * 2.0,
            (None, Some(upper)) => upper / 2.0,
            (Some(lower), Some(upper)) if upper / lower - 1.0 > settings.tolerance => {
                (lower + upper) / 2.0
            }
            (Some(lower), Some(_)) => {
                if count(&trials, lower) < settings.trials {
                    lower
                } else {
                    converged = true;
                    break;
                }
            }
        };
        if !(LOWEST_RATE..=HIGHEST_RATE).contains(&next) {
            break;
        }
        let seed = settings.seed + trials.len() as u64;
        let passed = trial(next, seed).await?;
        trials.push(TrialOutcome {
            rate: next,
            seed,
            passed,
        });
    }
    let (lower, upper) = bracket(&trials);
    Ok(SearchResult {
        lower,
        upper,
        converged,
        trials,
    })
}

fn count(trials: &[TrialOutcome], rate: f64) -> u32 {
    trials.iter().filter(|t| t.rate == rate).count() as u32
}

/// The bracket the trials so far give: the lowest rate at which a trial
/// failed, and the highest rate below it whose every trial passed.
fn bracket(trials: &[TrialOutcome]) -> (Option<f64>, Option<f64>) {
    let upper = trials
        .iter()
        .filter(|t| !t.passed)
        .map(|t| t.rate)
        .min_by(f64::total_cmp);
    let lower = trials
        .iter()
        .filter(|t| t.passed && upper.is_none_or(|u| t.rate < u))
        .map(|t| t.rate)
        .max_by(f64::total_cmp);
    (lower, upper)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SearchSettings {
        SearchSettings {
            start_rate: 1.0,
            tolerance: 0.05,
            trials: 3,
            max_trials: 60,
            seed: 10,
        }
    }

    async fn against(capacity: f64, settings: SearchSettings) -> SearchResult {
        search(settings, |rate, _| async move { Ok(rate <= capacity) })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_sharp_boundary_is_bracketed_within_the_tolerance() {
        let result = against(13.7, settings()).await;
        let (lower, upper) = (result.lower.unwrap(), result.upper.unwrap());
        assert!(result.converged, "{result:?}");
        assert!(lower <= 13.7 && 13.7 < upper, "{lower} {upper}");
        assert!(upper / lower - 1.0 <= 0.05);
        // The lower end was tried three times, with distinct seeds.
        assert_eq!(count(&result.trials, lower), 3);
        assert!(count(&result.trials, upper) >= 1);
        let mut seeds: Vec<u64> = result.trials.iter().map(|t| t.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), result.trials.len());
    }

    #[tokio::test]
    async fn a_start_above_capacity_halves_down() {
        let result = against(
            0.3,
            SearchSettings {
                start_rate: 8.0,
                ..settings()
            },
        )
        .await;
        assert!(
            result.lower.unwrap() <= 0.3 && 0.3 < result.upper.unwrap(),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_noisy_boundary_moves_the_lower_end_below_disagreeing_trials() {
        // Trials at 10 or above fail; between 9 and 10 every other trial fails.
        let mut n = 0u32;
        let result = search(
            SearchSettings {
                start_rate: 8.0,
                ..settings()
            },
            |rate, _| {
                n += 1;
                let passed = rate < 9.0 || (rate < 10.0 && n.is_multiple_of(2));
                async move { Ok(passed) }
            },
        )
        .await
        .unwrap();
        let (lower, upper) = (result.lower.unwrap(), result.upper.unwrap());
        assert!(result.converged, "{result:?}");
        assert!(lower < 10.0 && upper <= 10.0, "{result:?}");
        assert!(upper / lower - 1.0 <= 0.05, "{result:?}");
        assert!(
            result
                .trials
                .iter()
                .filter(|t| t.rate == lower)
                .all(|t| t.passed)
        );
    }

    #[tokio::test]
    async fn nothing_passing_ends_without_a_lower_end() {
        let result = against(
            0.0,
            SearchSettings {
                max_trials: 30,
                ..settings()
            },
        )
        .await;
        assert_eq!(result.lower, None);
        assert!(!result.converged);
    }
}
