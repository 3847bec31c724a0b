"""What a rank runs inside: the role's context, the supervisor and job, the network and CPU affinity,
checkpoints, fault injection, the command-line helpers every entry point shares."""
