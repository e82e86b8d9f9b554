//! Pod metadata for the per-process series: a kube-rs watch of this node's
//! pods (field selector `spec.nodeName=<node>`) keeps an index from pod UID
//! to namespace, name and container names by container id. Processes are
//! matched to pods through their cgroup path (see `identity`).
//!
//! When the API server cannot be reached the agent keeps counting: the watch
//! retries with backoff, the failure is logged once, and
//! `slowpath_kubernetes_up` is 0. A pod that is deleted (or gone from a
//! relist) stays in the index for the grace period so the series of its last
//! processes keep their labels; then its series are dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Config};
use tracing::{debug, info, warn};

use crate::labels::identity::CgroupIdentity;

/// What the series of one pod's processes are labelled with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodMeta {
    pub namespace: String,
    pub name: String,
    /// Container name by container id (the id without its `runtime://` prefix).
    pub containers: HashMap<String, String>,
    /// When the pod was deleted (or found missing at a relist).
    pub deleted_at: Option<Instant>,
}

/// Pods of this node by UID.
#[derive(Debug, Default)]
pub struct PodIndex {
    pods: HashMap<String, PodMeta>,
    /// UIDs seen since the last `Init` of a relist.
    relisted: Vec<String>,
}

/// The index, shared between the watch task and the BPF worker thread.
pub type SharedPodIndex = Arc<RwLock<PodIndex>>;

/// `namespace`, `pod`, `container` label values of one process (empty
/// when not known).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodLabels {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

impl PodIndex {
    /// Insert or update a pod from the API.
    pub fn apply(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let meta = PodMeta {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            containers: container_ids(pod),
            deleted_at: None,
        };
        self.relisted.push(uid.clone());
        self.pods.insert(uid, meta);
    }

    /// Mark a pod deleted now; its labels stay for the grace period.
    pub fn delete(&mut self, pod: &Pod, now: Instant) {
        if let Some(meta) = pod.metadata.uid.as_ref().and_then(|u| self.pods.get_mut(u)) {
            meta.deleted_at.get_or_insert(now);
        }
    }

    /// A relist starts: remember which pods it brings back.
    pub fn relist_started(&mut self) {
        self.relisted.clear();
    }

    /// A relist is complete: pods it did not bring back were deleted meanwhile.
    pub fn relist_done(&mut self, now: Instant) {
        for (uid, meta) in &mut self.pods {
            if !self.relisted.contains(uid) {
                meta.deleted_at.get_or_insert(now);
            }
        }
        self.relisted.clear();
    }

    /// Labels for a process in the cgroup `identity`: empty values for what is
    /// not known (not in a pod, or the watch has not seen the pod yet).
    pub fn labels(&self, identity: &CgroupIdentity) -> PodLabels {
        let meta = identity.pod_uid.as_ref().and_then(|uid| self.pods.get(uid));
        let container = meta
            .zip(identity.container_id.as_ref())
            .and_then(|(m, id)| m.containers.get(id).cloned())
            .unwrap_or_default();
        PodLabels {
            namespace: meta.map(|m| m.namespace.clone()).unwrap_or_default(),
            pod: meta.map(|m| m.name.clone()).unwrap_or_default(),
            container,
        }
    }

    /// Whether the pod `uid` was deleted more than `grace` ago.
    pub fn expired(&self, uid: &str, grace: Duration, now: Instant) -> bool {
        self.pods
            .get(uid)
            .and_then(|m| m.deleted_at)
            .is_some_and(|at| now.duration_since(at) >= grace)
    }

    /// Forget pods deleted more than `grace` ago (after their series went).
    pub fn prune(&mut self, grace: Duration, now: Instant) {
        self.pods
            .retain(|_, m| m.deleted_at.is_none_or(|at| now.duration_since(at) < grace));
    }
}

/// Container name by id from the pod status (init and ephemeral included).
fn container_ids(pod: &Pod) -> HashMap<String, String> {
    let Some(status) = &pod.status else {
        return HashMap::new();
    };
    [
        &status.container_statuses,
        &status.init_container_statuses,
        &status.ephemeral_container_statuses,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .filter_map(|c| {
        let id = c.container_id.as_deref()?;
        let bare = id.split_once("://").map_or(id, |(_, bare)| bare);
        Some((bare.to_string(), c.name.clone()))
    })
    .collect()
}

/// Settings of the pod watch.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    pub node_name: String,
    /// Kubeconfig file; `None`: in-cluster config, else $KUBECONFIG/~/.kube/config.
    pub kubeconfig: Option<PathBuf>,
}

/// Watch state shared with the metrics.
#[derive(Clone, Default)]
pub struct KubeState {
    pub index: SharedPodIndex,
    /// Whether the last watch request succeeded (`slowpath_kubernetes_up`).
    pub up: Arc<AtomicBool>,
}

/// Build the API client (no request is made yet). Fails on a bad or
/// missing configuration, not on an unreachable server.
pub async fn client(opts: &WatchOptions) -> Result<Client> {
    let config = match &opts.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => Config::infer().await.context(
            "no Kubernetes configuration: run in a pod with a service account, \
             or pass --kubeconfig",
        )?,
    };
    Client::try_from(config).context("creating the Kubernetes client")
}

/// Keep the index in sync with this node's pods, forever.
pub async fn watch_pods(client: Client, opts: WatchOptions, state: KubeState) {
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", opts.node_name));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let mut failing = false;
    info!(node = %opts.node_name, "watching this node's pods");
    while let Some(event) = events.next().await {
        let mut index = match state.index.write() {
            Ok(index) => index,
            Err(poisoned) => poisoned.into_inner(),
        };
        match event {
            // Init is emitted before the list request is made: it says
            // nothing about the API server being reachable.
            Ok(Event::Init) => index.relist_started(),
            Ok(event) => {
                if failing {
                    info!("Kubernetes API reachable again");
                    failing = false;
                }
                state.up.store(true, Ordering::Relaxed);
                match event {
                    Event::Init => {}
                    Event::InitApply(pod) | Event::Apply(pod) => index.apply(&pod),
                    Event::InitDone => index.relist_done(Instant::now()),
                    Event::Delete(pod) => index.delete(&pod, Instant::now()),
                }
            }
            Err(err) => {
                state.up.store(false, Ordering::Relaxed);
                if failing {
                    debug!(error = %err, "pod watch still failing");
                } else {
                    warn!(error = %err, "pod watch failed: counting goes on without pod labels; retrying with backoff");
                    failing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use kube::api::ObjectMeta;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn pod(uid: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(name.into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "cart".into(),
                    container_id: Some(format!("containerd://{ID}")),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn identity(uid: &str) -> CgroupIdentity {
        CgroupIdentity {
            runtime: Some("containerd"),
            container_id: Some(ID.into()),
            pod_uid: Some(uid.into()),
            unit: None,
        }
    }

    #[test]
    fn labels_come_from_the_pod_and_its_container_status() {
        let mut index = PodIndex::default();
        assert_eq!(
            index.labels(&identity("u1")).pod,
            "",
            "unknown pod: empty labels"
        );
        index.apply(&pod("u1", "cart-7d9"));
        let labels = index.labels(&identity("u1"));
        assert_eq!(
            [labels.namespace, labels.pod, labels.container],
            ["shop", "cart-7d9", "cart"]
        );
    }

    #[test]
    fn deleted_pods_expire_after_the_grace_period() {
        let mut index = PodIndex::default();
        let t0 = Instant::now();
        let grace = Duration::from_secs(300);
        index.apply(&pod("u1", "a"));
        index.delete(&pod("u1", "a"), t0);
        assert!(!index.expired("u1", grace, t0 + Duration::from_secs(10)));
        assert!(index.expired("u1", grace, t0 + grace));
        // labels survive until the prune
        assert_eq!(index.labels(&identity("u1")).pod, "a");
        index.prune(grace, t0 + grace);
        assert_eq!(index.labels(&identity("u1")).pod, "");
    }

    #[test]
    fn a_relist_finds_pods_deleted_while_the_watch_was_down() {
        let mut index = PodIndex::default();
        let t0 = Instant::now();
        index.apply(&pod("u1", "a"));
        index.apply(&pod("u2", "b"));
        index.relist_started();
        index.apply(&pod("u2", "b"));
        index.relist_done(t0);
        assert!(index.expired("u1", Duration::ZERO, t0));
        assert!(!index.expired("u2", Duration::ZERO, t0));
    }
}
