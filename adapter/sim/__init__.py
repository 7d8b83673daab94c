"""HPA simulator: the kube-controller-manager HPA algorithm (docs/hpa-algorithm.md), a workload with pod
start-up delays, and metric producers (replay, traffic, prescaler manifests) on simulated time.

Entry points: `adapter.sim.scenario.load_scenario` + `adapter.sim.engine.run_scenario`, the controller
`adapter.sim.controller.HpaController`, and the CLI `prescaler simulate` (`adapter.sim.cli`).
"""
