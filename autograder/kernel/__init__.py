"""Layer 5, one student's kernel: started in the sandbox over a capped channel (``session``, its sandbox and
environment from ``environment``), forked from a server that imported ipykernel and JAX (``forkserver``), started
ahead (``pool``); what runs inside it (``inside``), what crosses as data (``transfer``), and the proof that a kernel
imports the grader's own scalelib (``library_proof``); failures in ``kernel_errors``.
"""
