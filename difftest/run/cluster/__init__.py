"""`--executor ray`: every probe of a comparison as a task (fuzz: an actor) on a Ray cluster.

The host still prepares everything (`build.workspace.prepare`), reads the result cache and judges
every verdict through the one door (`tiers.door`). What moves to a node is the probe itself: the
node builds or reuses the branch environment from what the host ships (`build.envs.shipped`),
runs the probe with the host's job, nonce and limits (`run.probes.runner.play_probe`), and sends
back the records and log bytes with how the process ended; the host checks them with the reader a
local probe's files go through (`runner.read_delivered`).

- `connect.py`: the connection and the nodes (Ray, an optional extra, is first imported there);
- `node.py`: what runs on a node (the task's body, the fuzz actor's);
- `keeper.py`: the process on a node that ends a worker's probes if Ray kills the worker;
- `executor.py`: the host's side of a tier's probes: placement, one retry on another node,
  cancellation, the `BranchRun` the door judges.

`fuzz`'s warm probes as actors build on these (`run.fuzz.ray_warm`).
"""
