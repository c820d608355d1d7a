"""A kube-scheduler HTTP extender that places GPU pods by fragmentation gradient descent (FGD).

- :mod:`~scheduler.extender.wire`: the ``k8s.io/kube-scheduler/extender/v1`` JSON documents (ExtenderArgs,
  ExtenderFilterResult, HostPriorityList, ExtenderBindingArgs/Result), keys exactly as the Go field names.
- :mod:`~scheduler.extender.resources`: a Pod's request and a Node's GPUs at the granularity the API exposes
  (whole ``nvidia.com/gpu``, time-sliced ``nvidia.com/gpu.shared`` replicas, CPU and memory).
- :mod:`~scheduler.extender.view`: the extender's view of nodes and pods, the expected workload, and the
  verbs (filter, prioritize, bind); scoring is :func:`scheduler.fgd.frag.fgd_scores`, the simulator's own.
- :mod:`~scheduler.extender.layout`: the view's built layout and the arithmetic on it (a pod's GPUs, fit, score).
- :mod:`~scheduler.extender.app`: the WSGI application (POST /filter, /prioritize, /bind; GET /healthz).
- :mod:`~scheduler.extender.watch`: keeps the view from the API server (list + watch) and binds pods.
- :mod:`~scheduler.extender.binder`: posts a pod's Binding within the scheduler's ``httpTimeout``; a pod already
  bound to the target node is a success.
"""
