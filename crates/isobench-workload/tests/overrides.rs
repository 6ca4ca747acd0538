//! Command-line overrides on top of workload files: precedence and errors.

mod common;

use std::time::Duration;

use common::{first, workload};
use isobench_workload::{ArrivalKind, Overrides, Workload};

const REQUEST: &str = "[request]\ninput_tokens = 16\noutput_tokens = 16\n";

fn closed_file() -> Workload {
    workload(&format!(
        "{REQUEST}[load]\nconcurrency = 8\nmax_requests = 50\n"
    ))
}

fn poisson_file() -> Workload {
    workload(&format!(
        "{REQUEST}[load]\narrival = \"poisson\"\nrate = 5.0\nramp_up = \"10s\"\nmax_requests = 50\n"
    ))
}

fn applied(mut workload: Workload, overrides: Overrides) -> Workload {
    workload
        .apply(&overrides)
        .unwrap_or_else(|error| panic!("{error}"));
    workload
}

fn flag_error(mut workload: Workload, overrides: Overrides) -> String {
    let error = workload
        .apply(&overrides)
        .expect_err("the override is refused");
    assert_eq!(error.kind(), "flag");
    error.to_string()
}

fn description(workload: &Workload) -> String {
    workload.plan(None).unwrap().shape.description
}

/// Regression: `--rate 20` on a closed-loop file kept its `concurrency = 8`
/// as a cap, so a slow server quietly closed the loop again.
#[test]
fn rate_turns_a_closed_loop_into_an_uncapped_open_loop() {
    let workload = applied(
        closed_file(),
        Overrides {
            rate: Some(20.0),
            ..Overrides::default()
        },
    );
    assert_eq!(workload.arrival(), ArrivalKind::Poisson);
    let plan = workload.plan(None).unwrap();
    assert_eq!(plan.shape.description, "poisson 20 req/s");
    assert_eq!(plan.shape.max_concurrency, None);
    assert_eq!(plan.shape.offered_rate, Some(20.0));
    assert!(first(plan, 3).iter().all(|r| r.offset.is_some()));
    for arrival in [ArrivalKind::Constant, ArrivalKind::Gamma] {
        let workload = applied(
            closed_file(),
            Overrides {
                arrival: Some(arrival),
                rate: Some(20.0),
                ..Overrides::default()
            },
        );
        assert_eq!(workload.plan(None).unwrap().shape.max_concurrency, None);
    }
}

#[test]
fn an_open_loop_keeps_a_cap_given_with_it_or_in_an_open_loop_file() {
    let capped_by_flag = applied(
        closed_file(),
        Overrides {
            rate: Some(20.0),
            concurrency: Some(4),
            ..Overrides::default()
        },
    );
    let plan = capped_by_flag.plan(None).unwrap();
    assert_eq!(
        plan.shape.description,
        "poisson 20 req/s, at most 4 in flight"
    );
    assert_eq!(plan.shape.max_concurrency, Some(4));
    let capped = workload(&format!(
        "{REQUEST}[load]\narrival = \"poisson\"\nrate = 5.0\nconcurrency = 3\nmax_requests = 5\n"
    ));
    let faster = applied(
        capped,
        Overrides {
            rate: Some(50.0),
            ..Overrides::default()
        },
    );
    assert_eq!(faster.plan(None).unwrap().shape.max_concurrency, Some(3));
}

/// Regression: `short.toml --rate 2000 --duration 5s` stopped after 0.09 s
/// at the file's `max_requests = 200`.
#[test]
fn a_stop_condition_flag_replaces_all_of_the_files() {
    let mut short = Workload::from_file(&common::workloads().join("short.toml")).unwrap();
    short
        .apply(&Overrides {
            rate: Some(2000.0),
            duration: Some(Duration::from_secs(5)),
            ..Overrides::default()
        })
        .unwrap();
    let plan = short.plan(None).unwrap();
    assert_eq!(plan.shape.max_requests, None);
    assert_eq!(plan.shape.duration, Some(Duration::from_secs(5)));
    assert_eq!(plan.shape.max_concurrency, None);
    assert_eq!(plan.shape.description, "poisson 2000 req/s, 8 warm-up");

    let timed = workload(&format!(
        "{REQUEST}[load]\nconcurrency = 2\nduration = \"1h\"\nmax_requests = 100\n"
    ));
    let fewer = applied(
        timed,
        Overrides {
            max_requests: Some(3),
            ..Overrides::default()
        },
    );
    let plan = fewer.plan(None).unwrap();
    assert_eq!(plan.shape.duration, None);
    assert_eq!(plan.shape.max_requests, Some(3));
    assert_eq!(plan.shape.max_concurrency, Some(2), "still a closed loop");
    assert_eq!(plan.requests.count(), 3);
}

#[test]
fn arrival_chooses_the_process_for_the_rate() {
    let workload = applied(
        closed_file(),
        Overrides {
            rate: Some(4.0),
            arrival: Some(ArrivalKind::Constant),
            ..Overrides::default()
        },
    );
    let offsets: Vec<_> = first(workload.plan(None).unwrap(), 3)
        .iter()
        .map(|r| r.offset.unwrap())
        .collect();
    assert_eq!(
        offsets,
        [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_millis(500)
        ]
    );
}

#[test]
fn rate_replaces_the_rate_of_an_open_loop_and_keeps_its_ramp() {
    let workload = applied(
        poisson_file(),
        Overrides {
            rate: Some(9.0),
            ..Overrides::default()
        },
    );
    assert_eq!(description(&workload), "poisson 9 req/s, ramp-up 10s");
}

#[test]
fn concurrency_caps_an_open_loop() {
    let workload = applied(
        poisson_file(),
        Overrides {
            concurrency: Some(3),
            ..Overrides::default()
        },
    );
    let plan = workload.plan(None).unwrap();
    assert_eq!(plan.shape.max_concurrency, Some(3));
    assert!(plan.shape.description.ends_with(", at most 3 in flight"));
}

#[test]
fn arrival_closed_ignores_the_rate_fields_of_the_file() {
    let workload = applied(
        poisson_file(),
        Overrides {
            arrival: Some(ArrivalKind::Closed),
            concurrency: Some(2),
            ..Overrides::default()
        },
    );
    let plan = workload.plan(None).unwrap();
    assert_eq!(plan.shape.description, "closed loop, 2 concurrent");
    assert_eq!(plan.shape.offered_rate, None);
    assert!(first(plan, 5).iter().all(|r| r.offset.is_none()));
    // Without --concurrency a closed loop runs one request at a time.
    let one = applied(
        poisson_file(),
        Overrides {
            arrival: Some(ArrivalKind::Closed),
            ..Overrides::default()
        },
    );
    assert_eq!(one.plan(None).unwrap().shape.max_concurrency, Some(1));
}

#[test]
fn gamma_takes_the_file_rate_and_the_burstiness_flag() {
    let workload = applied(
        poisson_file(),
        Overrides {
            arrival: Some(ArrivalKind::Gamma),
            burstiness: Some(0.5),
            ..Overrides::default()
        },
    );
    assert_eq!(
        description(&workload),
        "gamma 5 req/s (burstiness 0.5), ramp-up 10s"
    );
}

#[test]
fn stop_conditions_warmup_and_seed_replace_the_file() {
    let workload = applied(
        closed_file(),
        Overrides {
            max_requests: Some(7),
            warmup: Some(2),
            seed: Some(99),
            duration: Some(Duration::from_secs(30)),
            ..Overrides::default()
        },
    );
    assert_eq!(workload.seed(), 99);
    let plan = workload.plan(None).unwrap();
    assert_eq!(plan.shape.max_requests, Some(7));
    assert_eq!(plan.shape.duration, Some(Duration::from_secs(30)));
    let requests: Vec<_> = plan.requests.collect();
    assert_eq!(requests.len(), 9);
    assert_eq!(requests.iter().filter(|r| r.warmup).count(), 2);
}

#[test]
fn a_duration_flag_is_a_stop_condition() {
    let mut endless = workload(REQUEST);
    assert!(endless.plan(None).is_err());
    endless
        .apply(&Overrides {
            duration: Some(Duration::from_secs(5)),
            ..Overrides::default()
        })
        .unwrap();
    assert!(endless.plan(None).is_ok());
}

#[test]
fn overrides_that_do_not_fit_are_refused_with_the_flag() {
    let message = flag_error(
        closed_file(),
        Overrides {
            arrival: Some(ArrivalKind::Poisson),
            ..Overrides::default()
        },
    );
    assert_eq!(
        message,
        "--arrival: arrival = poisson needs a rate: pass --rate R or set load.rate in test.toml"
    );
    let bursts = workload(&format!(
        "{REQUEST}[load]\narrival = \"burst\"\nburst_size = 4\nburst_interval = \"1s\"\nmax_requests = 8\n"
    ));
    let message = flag_error(
        bursts,
        Overrides {
            rate: Some(3.0),
            ..Overrides::default()
        },
    );
    assert!(
        message.starts_with("--rate: does not apply to arrival = burst"),
        "{message}"
    );
    let message = flag_error(
        poisson_file(),
        Overrides {
            burstiness: Some(2.0),
            ..Overrides::default()
        },
    );
    assert!(
        message.starts_with("--burstiness: only applies to arrival = gamma"),
        "{message}"
    );
    let message = flag_error(
        closed_file(),
        Overrides {
            arrival: Some(ArrivalKind::Burst),
            ..Overrides::default()
        },
    );
    assert!(message.contains("needs load.burst_size and load.burst_interval in test.toml"));
    let message = flag_error(
        closed_file(),
        Overrides {
            arrival: Some(ArrivalKind::Trace),
            ..Overrides::default()
        },
    );
    assert!(
        message.contains("needs request.dataset with kind = \"trace\""),
        "{message}"
    );
}

#[test]
fn out_of_range_flags_are_refused() {
    for (overrides, expected) in [
        (
            Overrides {
                concurrency: Some(0),
                ..Overrides::default()
            },
            "--concurrency: must be >= 1",
        ),
        (
            Overrides {
                rate: Some(0.0),
                ..Overrides::default()
            },
            "--rate: must be a number",
        ),
        (
            Overrides {
                rate: Some(f64::NAN),
                ..Overrides::default()
            },
            "--rate: must be a number",
        ),
        (
            Overrides {
                max_requests: Some(0),
                ..Overrides::default()
            },
            "--max-requests: must be >= 1",
        ),
        (
            Overrides {
                duration: Some(Duration::ZERO),
                ..Overrides::default()
            },
            "--duration: must be longer than 0s",
        ),
    ] {
        let message = flag_error(closed_file(), overrides);
        assert!(message.starts_with(expected), "{message}");
    }
}

#[test]
fn arrival_kinds_parse_from_flag_text() {
    assert_eq!("gamma".parse::<ArrivalKind>().unwrap(), ArrivalKind::Gamma);
    assert_eq!(ArrivalKind::Burst.to_string(), "burst");
    let error = "often".parse::<ArrivalKind>().unwrap_err().to_string();
    assert_eq!(
        error,
        "--arrival: unknown arrival process `often` (accepted: closed, constant, poisson, gamma, burst, trace)"
    );
}
