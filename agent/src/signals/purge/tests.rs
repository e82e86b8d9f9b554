use super::*;
use crate::node::NodeFacts;
use crate::signals::test_support::{delta, export_one_of, observe, observe_on};

const DONTNEED: usize = slot!(sp_purge_call::SP_PURGE_MADV_DONTNEED);
const MUNMAP: usize = slot!(sp_purge_call::SP_PURGE_MUNMAP);

#[test]
fn a_storm_gets_the_finding_with_its_bytes_and_cpu() {
    let storm = delta("python3", |c| {
        c.purge_calls[DONTNEED] = 300_000;
        c.purge_bytes[DONTNEED] = 300_000 * 65_536;
    });
    let by_design = delta("java", |c| c.purge_calls[DONTNEED] = 500);
    let mut node = NodeFacts::default();
    let cost = PurgeCost {
        syscall_seconds: 1e-6,
        refault_seconds_per_page: Some(2e-7),
    };
    node.extend([std::sync::Arc::new(cost) as _]);
    let f = observe_on(&node, &[storm, by_design], storm_finding).unwrap();
    assert_eq!(f.id, "purge_storm");
    assert_eq!(f.processes.len(), 1, "only the storm");
    let p = &f.processes[0];
    assert_eq!(p.identity.comm, "python3");
    let (calls, bytes) = (p.per_second, p.detail["bytes_given_back_per_second"]);
    assert_eq!(bytes, calls * 65_536.0);
    let cpu = p.detail["estimated_cpu_percent"];
    assert!((cpu - cost.cpu(calls, bytes) * 100.0).abs() < 1e-9, "{cpu}");
    assert_eq!(p.detail["madvise_dontneed_per_second"], calls);
    if cfg!(target_arch = "x86_64") {
        assert_eq!(p.detail["tlb_shootdowns_per_second"], 0.0);
    }
    assert!(
        f.title.starts_with("python3 gives memory back"),
        "{}",
        f.title
    );
    assert!(f.fix.contains("dirty_decay_ms") && f.fix.contains("MALLOC_MMAP_THRESHOLD_"));
}

#[test]
fn purges_by_design_get_no_finding() {
    let go = delta("app", |c| c.purge_calls[DONTNEED] = 100);
    assert!(observe(&[go], storm_finding).is_none());
}

#[test]
fn every_call_kind_is_exported_with_its_bytes() {
    let d = delta("app", |c| {
        c.purge_calls = [70, 3, 2, 1];
        c.purge_bytes = [7000, 300, 200, 100];
    });
    let families = export_one_of(&SIGNAL, d);
    assert_eq!(families[0].name(), PURGE_CALLS.name);
    let values = |i: usize| -> Vec<f64> {
        families[i]
            .get_metric()
            .iter()
            .map(|m| m.get_counter().get_value())
            .collect()
    };
    assert_eq!(values(0), [70.0, 3.0, 2.0, 1.0]);
    assert_eq!(values(1), [7000.0, 300.0, 200.0, 100.0]);
}

#[test]
fn a_few_unmaps_add_no_series() {
    let loader = delta("sh", |c| {
        c.purge_calls[MUNMAP] = SERIES_FROM - 1;
        c.purge_bytes[MUNMAP] = 37_967;
    });
    let families = export_one_of(&SIGNAL, loader);
    assert!(families.iter().all(|f| f.get_metric().is_empty()));
}

#[test]
fn every_known_source_matches_its_example_first() {
    crate::sources::tests::check_table(SOURCES);
}
