use super::*;
use crate::signals::test_support::{delta, export_one_of, observe};

/// `n` forks of `ms` each (in their bucket) of a process mapping `gib`.
fn forks(comm: &str, n: u64, ms: u64, gib: u64, execs: u64) -> crate::finding::Delta {
    delta(comm, |c| {
        let bucket = BUCKET_BOUNDS
            .iter()
            .position(|&b| ms as f64 / 1e3 <= b)
            .unwrap_or(BUCKET_COUNT - 1);
        c.fork_copies[bucket] = n;
        c.fork_copy_ns = n * ms * 1_000_000;
        c.fork_mapped_pages = n * (gib << 30) / procfs::page_size();
        c.fork_page_table_bytes = n * (gib << 21);
        c.fork_execs = execs;
    })
}

#[test]
fn a_large_process_that_spawns_gets_the_finding_with_the_spawn_fix() {
    // in a one-second window: 2 forks of 40 ms from 2 GiB, 8 %
    let jvm = forks("java", 2, 40, 2, 2);
    let shell = forks("bash", 5_000, 0, 0, 5_000); // small and often: not named
    let f = observe(&[jvm, shell], large_forks_finding).unwrap();
    assert_eq!(f.id, "large_forks");
    assert_eq!(f.processes.len(), 1, "only the large one");
    let p = &f.processes[0];
    assert_eq!(p.identity.comm, "java");
    assert!((p.detail["seconds_per_fork"] - 0.040).abs() < 1e-12);
    assert_eq!(p.detail["mapped_bytes_per_fork"], (2u64 << 30) as f64);
    assert_eq!(p.detail["exec_after_fork_share"], 1.0);
    assert!(f.title.starts_with("java copies 2.0 GiB"), "{}", f.title);
    assert!(f.fix.contains("posix_spawn"), "{}", f.fix);
    assert_eq!(f.evidence["pattern"], "spawn (fork then exec)");
}

#[test]
fn one_fork_over_a_second_is_named_as_a_copy() {
    let redis = forks("redis-server", 1, 3_460, 11, 0);
    let f = observe(&[redis], large_forks_finding).unwrap();
    assert_eq!(f.processes[0].detail["forks_over_1s"], 1.0);
    assert!(f.fix.contains("transparent huge pages"), "{}", f.fix);
}

#[test]
fn rare_small_forks_get_no_finding() {
    let snapshot = forks("postgres", 1, 5, 1, 0); // 0.5 % of the second
    assert!(observe(&[snapshot], large_forks_finding).is_none());
}

#[test]
fn every_family_is_exported_with_its_histogram() {
    let d = forks("app", 3, 30, 1, 2);
    let families = export_one_of(&SIGNAL, d);
    let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
    assert_eq!(
        names,
        SIGNAL.families.iter().map(|f| f.name).collect::<Vec<_>>()
    );
    assert_eq!(families[0].get_metric()[0].get_counter().get_value(), 3.0);
    assert!((families[1].get_metric()[0].get_counter().get_value() - 0.09).abs() < 1e-12);
    let h = families[2].get_metric()[0].get_histogram();
    assert_eq!(h.get_sample_count(), 3);
    assert_eq!(
        families[3].get_metric()[0].get_counter().get_value(),
        3.0 * (1u64 << 30) as f64
    );
    assert_eq!(families[5].get_metric()[0].get_counter().get_value(), 2.0);
}

#[test]
fn forks_below_the_series_floor_add_no_series() {
    let shell = delta("sh", |c| {
        c.fork_copies[0] = 9;
        c.fork_copy_ns = SERIES_FROM_NS - 1;
    });
    let families = export_one_of(&SIGNAL, shell);
    assert!(families.iter().all(|f| f.get_metric().is_empty()));
}

#[test]
fn the_bounds_come_from_the_kernel_side_in_order() {
    assert_eq!(BUCKET_BOUNDS[0], 0.001);
    assert_eq!(BUCKET_BOUNDS[BUCKET_COUNT - 2], 10.0);
    assert!(BUCKET_BOUNDS.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn small_forks_add_no_series_however_many() {
    // a process churner: 10,000 forks of 0.2 ms, 2 s in all
    let churn = delta("nginx", |c| {
        c.fork_copies[0] = 10_000;
        c.fork_copy_ns = 10_000 * 200_000;
    });
    let families = export_one_of(&SIGNAL, churn);
    assert!(families.iter().all(|f| f.get_metric().is_empty()));
}

#[test]
fn every_known_source_matches_its_example_first() {
    crate::sources::tests::check_table(SOURCES);
}
