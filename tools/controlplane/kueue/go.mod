module gpujobs.local/controlplane/kueue

go 1.26

replace github.com/ray-project/kuberay/ray-operator => github.com/ray-project/kuberay/ray-operator v1.5.0

require sigs.k8s.io/kueue v0.17.0 // indirect
