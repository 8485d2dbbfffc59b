module gpujobs.local/controlplane/kueue

go 1.26

require sigs.k8s.io/kueue v0.17.0 // indirect
