"""Layer 1, the OS sandbox of one process tree: ``python -m autograder.sandbox CONFIG_JSON -- CMD...``.

It knows no notebook, no scalelib and no course: it runs a command under one
:class:`~autograder.sandbox.config.SandboxConfig`.

What it does, in this order (Linux, no root needed where unprivileged user namespaces are enabled):

1. resource limits (always, even without a sandbox): address space (``--memory-mb``), file size, no core
   dumps, and a CPU-seconds backstop; a memory cgroup for all the kernel's processes together where the host
   allows one (the processes sit in a leaf below the cgroup that carries the limit);
2. a child of the launcher joins that cgroup and makes new mount, network, PID, IPC, UTS and cgroup
   namespaces (as root: owned by the host, so that no process inside holds a capability over them; otherwise
   inside a user namespace of the grader's uid); its child is PID 1 there and becomes the kernel, so the
   kernel can neither see nor signal the grader, other kernels or anything else;
3. a fresh root file system (``pivot_root`` into a tmpfs, built in a tmpfs of the sandbox's own mount
   namespace: nothing is made on the host's disk) that contains only what Python needs, read-only: ``/usr``,
   ``/lib*``, ``/bin``, ``/etc``, the interpreter and the virtual environment, and the allowed part of
   ``scalelib``; a ``/dev`` holding only null, zero, full, random and urandom; ``/proc`` with ``/proc/sys``
   read-only. The only writable places are the kernel's scratch folder, ``/tmp`` and ``/dev/shm``, all three
   in one tmpfs of ``disk_mb`` (the student's whole disk: every file of every process, also counted in the
   memory cgroup). ``solutions/``, ``.git``, the gradebook, the grading output, other students' notebooks and
   home folders simply do not exist inside;
4. PID 1 then runs as an unprivileged host uid: a grader run as root drops it, after building the root and
   before any user namespace exists, to a dedicated uid and gid of no account, with no supplementary groups
   (:func:`.confine.kernel_ids`; another one per kernel); otherwise it is the grader's own uid. A user namespace of its
   own (mapping only that uid) is limited to holding one more: a second user+mount namespace on top, which
   locks every mount (read-only stays read-only, the old root cannot be re-exposed), in which the kernel is
   ``exec``'d (or, for a launcher forked by :mod:`autograder.kernel.forkserver`, run in that process once every other
   descriptor is closed), holding no capability at all (bounding set empty, securebits locked, no_new_privs), so it
   can make no namespace of its own (each kind, alone or together), mount nothing, and has no System V shared
   memory or message queue (its IPC namespace allows none). The
   kernel talks to the grader over Unix sockets in its scratch folder, which the grader reaches through
   ``/proc/PID/root``; there is no network (only a down loopback).

If namespaces are unavailable, :func:`.probes.available` says so and the grader prints a loud warning and runs
kernels with resource limits only.

Its modules, in the order a launch uses them: ``config`` (the one typed configuration) and ``sandbox_errors`` ·
``rlimits`` (step 1) · ``cgroups`` (the memory cgroup) · ``syscalls`` (the Linux calls) · ``confine`` (steps 3 and 4,
what PID 1 does) · ``launcher`` (step 2 and the whole launch) · ``watch`` (the launcher's watch while it runs) ·
``notes`` (what the launcher tells the grader) · ``probes`` (what this host allows; ``doctor``).
"""
