"""A kube-scheduler HTTP extender that places GPU pods by fragmentation gradient descent (FGD).

- :mod:`~scheduler.extender.wire`: the ``k8s.io/kube-scheduler/extender/v1`` JSON documents (ExtenderArgs,
  ExtenderFilterResult, HostPriorityList), keys exactly as the Go field names.
- :mod:`~scheduler.extender.resources`: a Pod's request and a Node's GPUs at the granularity the API exposes
  (whole ``nvidia.com/gpu``, time-sliced ``nvidia.com/gpu.shared`` replicas, CPU and memory).
- :mod:`~scheduler.extender.view`: the extender's view of nodes and pods, the expected workload, and the
  verbs (filter, prioritize); each pod is assumed on the node the scheduler will bind it to until the watch
  confirms it; scoring is :func:`scheduler.fgd.frag.fgd_scores`, the simulator's own.
- :mod:`~scheduler.extender.target`: which pods teach the view its expected workload (the GPU pods of its own
  pools, pending and recently bound).
- :mod:`~scheduler.extender.layout`: the view's built layout and the arithmetic on it (a pod's GPUs, fit, FGD's
  score and the profile's MostAllocated score).
- :mod:`~scheduler.extender.metrics`: ``/metrics``, its fragmentation view and its disagreements with the profile.
- :mod:`~scheduler.extender.app`: the WSGI application (POST /filter, /prioritize; GET /healthz, /readyz, /metrics).
- :mod:`~scheduler.extender.watch`: keeps the view from the API server (list + watch).

kube-scheduler binds the pods itself, with its own DefaultBinder: an extender that binds can make the scheduler
bind a pod a second time when its answer is late, and forget the pod's GPUs meanwhile (kubernetes v1.35.8
``pkg/scheduler/schedule_one.go``, ``extendersBinding`` then ``handleBindingCycleError`` -> ``ForgetPod``).
"""
