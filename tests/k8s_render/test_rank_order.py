"""Log rank order comes from the operators' index labels, never from pod names (JobSet's and the
batch Job controller's pod names end in a random 5-character suffix)."""
from gpujobs.backends.kubernetes.status.logs import pod_rank_order


def _pod(name, role, **labels):
    return {"metadata": {"name": name, "labels": {"gpujobs.dev/role": role, **labels}}}


def test_jobset_pods_ordered_by_completion_index_not_name():
    # JobSet pod names: <jobset>-<replicatedJob>-<jobIndex>-<completionIndex>-<random suffix>
    # (the Indexed Job's pods are <job>-<index>-<suffix>); the suffix may end in digits
    pods = [_pod("tj-node-0-1-pq3ab", "node", **{"batch.kubernetes.io/job-completion-index": "1",
                                                 "jobset.sigs.k8s.io/job-index": "0"}),
            _pod("tj-node-0-0-kx829", "node", **{"batch.kubernetes.io/job-completion-index": "0",
                                                 "jobset.sigs.k8s.io/job-index": "0"})]
    assert [p["metadata"]["name"] for p in pod_rank_order(pods)] == ["tj-node-0-0-kx829", "tj-node-0-1-pq3ab"]


def test_roles_first_then_replica_index():
    pods = [_pod("j-worker-10", "worker", **{"training.kubeflow.org/replica-index": "10"}),
            _pod("j-worker-9", "worker", **{"training.kubeflow.org/replica-index": "9"}),
            _pod("j-launcher-zz1", "launcher")]
    assert [p["metadata"]["name"] for p in pod_rank_order(pods)] == ["j-launcher-zz1", "j-worker-9", "j-worker-10"]
