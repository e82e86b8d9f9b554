//! The worker's reading of the kernel side: the ring buffers (exit records
//! and new cgroups), the lost-event counters, and the series of a refresh
//! with their pod labels.

use std::os::fd::AsRawFd;
use std::time::Instant;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, RingBuffer, RingBufferBuilder};
use tracing::warn;

use super::PodLabelling;
use crate::bpf::{self, types};
use crate::procs::{Aggregator, PendingCgroups, PendingRecords};
use crate::snapshot::{Series, SeriesKey, LOST_REASON_COUNT, LOST_REASON_NAMES};
use crate::wakeup::{Doorbell, Waiter};

/// The ring buffer manager over `proc_events` and `cgroup_events`, and the
/// waiter that sleeps on it and on `doorbell`.
pub(super) fn open_rings(
    loaded: &bpf::Loaded<'_>,
    pending: &PendingRecords,
    new_cgroups: &PendingCgroups,
    doorbell: &Doorbell,
) -> Result<(RingBuffer<'static>, Waiter)> {
    let mut builder = RingBufferBuilder::new();
    let records = pending.clone();
    builder.add(&loaded.skel.maps.proc_events, move |data: &[u8]| {
        let mut event = types::sp_proc_event {
            tgid: 0,
            kind: 0,
            proc: Default::default(),
        };
        if plain::copy_from_bytes(&mut event, data).is_ok() {
            records.borrow_mut().push(event);
        }
        0
    })?;
    let cgroups = new_cgroups.clone();
    builder.add(&loaded.skel.maps.cgroup_events, move |data: &[u8]| {
        if let Some(event) = cgroup_event(data) {
            cgroups.borrow_mut().push(event);
        }
        0
    })?;
    let ring = builder.build().context("opening the ring buffers")?;
    let waiter = Waiter::new(&[ring.epoll_fd(), doorbell.as_raw_fd()])
        .context("creating the worker's epoll set")?;
    Ok((ring, waiter))
}

/// (cgroup id, path) of one `struct sp_cgroup_event` record.
fn cgroup_event(data: &[u8]) -> Option<(u64, String)> {
    let id = u64::from_ne_bytes(data.get(..8)?.try_into().ok()?);
    let path = data.get(8..)?;
    let len = path.iter().position(|&b| b == 0)?;
    let path = String::from_utf8_lossy(&path[..len]).into_owned();
    (!path.is_empty()).then_some((id, path))
}

/// The series of one refresh, with their pod's labels when Kubernetes is on.
pub(super) fn export(
    series: Vec<(SeriesKey, types::sp_counters)>,
    pods: Option<&PodLabelling>,
) -> Vec<Series> {
    let index = pods.map(|p| p.index.read().unwrap_or_else(|e| e.into_inner()));
    series
        .into_iter()
        .map(|(key, counters)| Series {
            pod: index.as_ref().map(|i| i.labels(&key.cgroup.identity)),
            key,
            counters,
        })
        .collect()
}

/// Drop the series of pods deleted more than the grace period ago, then
/// forget those pods.
pub(super) fn drop_deleted_pods(agg: &mut Aggregator, pods: &PodLabelling) {
    let now = Instant::now();
    let grace = pods.deleted_pod_grace;
    {
        let index = pods.index.read().unwrap_or_else(|e| e.into_inner());
        agg.drop_retired(|key| {
            key.cgroup
                .identity
                .pod_uid
                .as_ref()
                .is_some_and(|uid| index.expired(uid, grace, now))
        });
    }
    pods.index
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .prune(grace, now);
}

/// Log lost-event counters that grew since the last call.
pub(super) fn log_new_losses(now: &[u64; LOST_REASON_COUNT], seen: &mut [u64; LOST_REASON_COUNT]) {
    for ((reason, &n), last) in LOST_REASON_NAMES.iter().zip(now).zip(seen.iter_mut()) {
        if n > *last {
            warn!(
                reason,
                new = n - *last,
                total = n,
                "events lost (slowpath_lost_events_total): raise the table capacity flags if this repeats"
            );
            *last = n;
        }
    }
}

/// Sum the per-CPU lost-event counters.
pub(super) fn read_lost(map: &dyn MapCore) -> [u64; LOST_REASON_COUNT] {
    let mut out = [0u64; LOST_REASON_COUNT];
    for (reason, slot) in out.iter_mut().enumerate() {
        let key = (reason as u32).to_ne_bytes();
        if let Ok(Some(per_cpu)) = map.lookup_percpu(&key, MapFlags::ANY) {
            *slot = per_cpu
                .iter()
                .filter_map(|v| v.as_slice().try_into().ok().map(u64::from_ne_bytes))
                .sum();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_cgroup_record_gives_its_id_and_path() {
        let mut record = 42u64.to_ne_bytes().to_vec();
        record.extend_from_slice(b"/system.slice/app.service\0garbage");
        assert_eq!(
            cgroup_event(&record),
            Some((42, "/system.slice/app.service".to_string()))
        );
        let mut empty = 7u64.to_ne_bytes().to_vec();
        empty.push(0);
        assert_eq!(cgroup_event(&empty), None, "an empty path names nothing");
        let mut unterminated = 7u64.to_ne_bytes().to_vec();
        unterminated.extend_from_slice(b"/a");
        assert_eq!(cgroup_event(&unterminated), None);
        assert_eq!(cgroup_event(&[1, 2, 3]), None, "shorter than the id");
    }

    #[test]
    fn only_grown_losses_move_what_was_seen() {
        let mut seen = [0u64; LOST_REASON_COUNT];
        let mut now = [0u64; LOST_REASON_COUNT];
        now[2] = 5;
        log_new_losses(&now, &mut seen);
        assert_eq!(seen, now);
        // a per-CPU sum read lower (a CPU went offline) is not a new loss
        let lower = [0u64; LOST_REASON_COUNT];
        log_new_losses(&lower, &mut seen);
        assert_eq!(seen[2], 5);
    }

    #[test]
    fn series_carry_pod_labels_only_with_kubernetes() {
        let key = SeriesKey {
            comm: "app".into(),
            cgroup: crate::snapshot::Cgroup::new("/kubepods/pod1234/abc".into()),
            pid: None,
        };
        let plain = export(vec![(key.clone(), Default::default())], None);
        assert!(plain[0].pod.is_none());
        let pods = PodLabelling {
            index: Default::default(),
            deleted_pod_grace: Duration::from_secs(1),
        };
        let labelled = export(vec![(key, Default::default())], Some(&pods));
        let pod = labelled[0]
            .pod
            .as_ref()
            .expect("every series gets pod labels");
        assert_eq!(
            pod.pod, "",
            "a pod the index does not know has empty labels"
        );
    }
}
