"""Every TensorDict key that crosses a role boundary, declared once.

Names follow TorchRL's conventions (``"observation"``, ``"action"``, ``("next", "reward")``...)
so that distrl trajectories plug into TorchRL losses, value estimators and replay buffers
unchanged. Losses list the keys they read (``*_IN_KEYS`` below); ``tests/test_keys.py`` checks
those lists against what the actors actually produce.
"""

from __future__ import annotations

OBSERVATION = "observation"
ACTION = "action"
#: log-probability of ``action`` under the behaviour policy (TorchRL's ProbabilisticActor key).
ACTION_LOG_PROB = "action_log_prob"
#: the learner update count of the parameters that chose ``action`` (design rule 1).
POLICY_VERSION = "policy_version"
NEXT = "next"
# A step's flat leaf names, each ``[*B, 1]``: under NEXT in a trajectory, in an env's ``_step``
# output, and in a SEED step message (there the worker sends them flat, see below).
#: the step's reward ``[*B, 1]`` float32
STEP_REWARD = "reward"
#: ``terminated | truncated`` ``[*B, 1]`` bool
STEP_DONE = "done"
#: the episode ended in a terminal state ``[*B, 1]`` bool
STEP_TERMINATED = "terminated"
#: the episode was cut by a time limit ``[*B, 1]`` bool
STEP_TRUNCATED = "truncated"
REWARD = (NEXT, STEP_REWARD)
DONE = (NEXT, STEP_DONE)
TERMINATED = (NEXT, STEP_TERMINATED)
TRUNCATED = (NEXT, STEP_TRUNCATED)
NEXT_OBSERVATION = (NEXT, OBSERVATION)
#: TorchRL's partial-reset mask ``[*B, 1]`` bool, in the TensorDict an env's ``_reset`` receives
RESET = "_reset"

#: a discrete policy's unnormalised log-probabilities ``[*B, A]`` float32 (ProbabilisticActor's input)
LOGITS = "logits"
#: which discrete actions are legal ``[*B, A]`` bool (True: legal): an env's ``info`` or Dict observation
#: key, and what a loaded policy reads beside ``observation`` (TorchRL's ``MaskedCategorical`` name).
#: Inside distrl it travels as the observation's last ``A`` entries (distrl/envs/action_mask.py)
ACTION_MASK = "action_mask"
#: a Gaussian policy's mean and standard deviation, each ``[*B, A]`` float32
LOC = "loc"
SCALE = "scale"

#: Keys an IMPALA learner reads from every ``[B, T]`` trajectory.
IMPALA_IN_KEYS = (OBSERVATION, ACTION, ACTION_LOG_PROB, POLICY_VERSION, NEXT_OBSERVATION, REWARD, DONE, TERMINATED)

#: Keys an A3C worker's loss reads from its own ``[B, T]`` segment (on-policy: no behaviour log-prob).
A3C_IN_KEYS = (OBSERVATION, ACTION, NEXT_OBSERVATION, REWARD, DONE, TERMINATED)

#: GAE advantage and value target of each sample (TorchRL's ``ClipPPOLoss`` names).
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
#: the critic's ``V(s)`` ``[N]`` at the rollout (the old value a clipped value loss stays near)
STATE_VALUE = "state_value"
#: log-probability ``[N]`` of the action under the network as its batch arrived at the learner (the
#: proximal policy of decoupled PPO, sf's ``algo.decoupled``)
PROXIMAL_LOG_PROB = "proximal_log_prob"

#: Keys a PPO update reads from every flattened ``[N]`` rollout batch (vecenv learner).
PPO_IN_KEYS = (OBSERVATION, ACTION, ACTION_LOG_PROB, ADVANTAGE, VALUE_TARGET)

# Side-band statistics an actor attaches to a message (not part of the trajectory batch).
EPISODE_RETURNS = "episode_returns"
EPISODE_LENGTHS = "episode_lengths"
#: In a trajectory, under NEXT: the return of the episode that ended at this step (read where
#: ``done``; TorchRL's ``RewardSum`` keeps its running sum the same way). Sample Factory's
#: returns travel so, in the slot, instead of a message.
EPISODE_RETURN = "episode_return"
ACTOR_RANK = "actor_rank"
ACTOR_FPS = "actor_fps"

# SEED: an env worker's step message to the inference server (flat, batch ``[]``) and the reply.
# A message carries one env group's OBSERVATION with the STEP_REWARD and end flags of the step that
# produced it (flat names: the server, not the worker, assembles the ``("next", ...)`` layout),
# plus the observation an episode ended on before its auto-reset; the reply carries ACTION and STOP.
FINAL_OBSERVATION = "final_observation"
WORKER_RANK = "rank"
ENV_GROUP = "group"
#: a worker's fresh id per process start: the server resets that worker's recurrent states on a new one.
RUN_ID = "run_id"
STOP = "stop"
#: the recurrent core state ``[B, 4, H]`` a SEED trajectory chunk starts from (before its step ``t = 0``).
CORE_STATE = "core_state"

# Ape-X: one n-step transition per stored item (flat ``[N]``). ("next", "observation") holds the
# state the target bootstraps from, s_{t+m}; the return and the bootstrap factor are explicit.
#: ``G_t = sum_{k<m} gamma^k r_{t+k}``, ``m = min(n, steps to the episode's end)``
NSTEP_RETURN = "nstep_return"
#: ``gamma^m`` when the window ended without a termination, else 0
BOOTSTRAP_DISCOUNT = "bootstrap_discount"
#: ``Q(s, a)`` of the action taken, under the parameters that chose it (TorchRL's QValueModule name)
CHOSEN_ACTION_VALUE = "chosen_action_value"
#: raw priority ``|delta|`` of an item (the replay raises it to ``alpha``)
PRIORITY = "priority"
#: where a sampled item lives in its replay shard, and the slot's write generation then (TorchRL's names)
REPLAY_INDEX = "index"
REPLAY_GENERATION = "index_generation"
#: normalised importance weight ``(N P(i))^-beta / max_j (N P(j))^-beta`` of a sampled item
PRIORITY_WEIGHT = "priority_weight"

#: Keys an Ape-X learner reads from every sampled ``[N]`` transition batch.
APEX_IN_KEYS = (OBSERVATION, ACTION, NEXT_OBSERVATION, NSTEP_RETURN, BOOTSTRAP_DISCOUNT, POLICY_VERSION)
#: ``p_i^alpha`` of a sampled item in its shard, and the shard's rank (the learner routes the new
#: priority back there and computes importance weights over every shard from the first)
SAMPLE_LEAF = "sample_leaf"
REPLAY_SHARD = "replay_shard"

# A3C: a worker's gradient message to the parameter server (flat, batch ``[]``) and the reply.
# The message carries GRADIENT, the POLICY_VERSION it was computed at, FRAMES, the worker's
# EPISODE_RETURNS / EPISODE_LENGTHS, its WORKER_RANK and WORKER_STATS; a reply (to ``push`` or
# ``pull``) carries STOP, the server's POLICY_VERSION and, when newer than the caller's, PARAMS.
#: the loss gradient flattened over the model's parameters, ``[P]`` float32
GRADIENT = "gradient"
#: the model's parameters flattened in the same order, ``[P]`` float32
PARAMS = "params"
#: env steps behind one message
FRAMES = "frames"
#: a TensorDict of the worker's scalar loss statistics (``loss_policy``, ``entropy``...)
WORKER_STATS = "stats"
#: the moments of the observations behind a gradient, ``[1 + 2F]`` float64 (``distrl.nn.obs_norm.batch_moments``):
#: the parameter server, which sees no data, merges them into ``model.obs_norm`` (models with one only)
OBS_MOMENTS = "obs_moments"

# Sample Factory: signals between rollout workers, inference and the learner carry slot numbers,
# never data (the data is in shared memory, distrl/recipes/sf/slots.py).
#: a trajectory slot's index in the shared ``[S, B, T]`` buffer (-1: none: stopping or evicted)
SLOT = "slot"
#: a shared-memory directory's path as ``[L]`` uint8 (distrl/data/shm.py)
SHM_PATH = "shm_path"
#: the shared ``[3]`` int64 control words (seqlocks, stop flag) and ``[W]`` evicted-rank flags of
#: Sample Factory's shared memory (its ``traj`` and ``params`` use TRAJ and PARAMS)
CONTROL = "control"
EVICTED = "evicted"

# Messages between roles (IMPALA, Ape-X, replay), beside the trajectory keys above.
#: an actor message's trajectory, a TensorDict ``[B, T]`` (IMPALA, SEED's batch) or SF's ``[S, B, T]`` slots
TRAJ = "traj"
#: the learner update count ``[]`` int64 of the parameters a sender holds (request) or of PARAMS (reply)
PARAMS_VERSION = "version"
#: ``[]`` bool: the replay (or a rate limiter) held the request back; try again
HELD = "held"
#: an actor's running count ``[]`` int64 of env errors it recovered from
ENV_ERRORS = "env_errors"
#: an Ape-X actor's exploration epsilon ``[]`` float
EPSILON = "epsilon"
#: seconds ``[]`` an Ape-X actor spent held back by the replay since its last message
HELD_S = "held_s"
#: a batch of Ape-X transitions ``[N]`` (the keys above) inserted into or sampled from a replay shard
TRANSITIONS = "transitions"

# The replay shards' request and reply fields (distrl/replay/server.py and client.py).
#: items ``[]`` int64 a sample request asks one shard for
SAMPLE_N = "n"
#: what the shard's rate limiter counts for a sample request ``[]`` float
SAMPLE_CHARGE = "charge"
#: ``p_i^alpha`` ``[N]`` of each item a shard served (the client files it as SAMPLE_LEAF)
SHARD_LEAF = "leaf"
#: a shard's priority mass ``[]``, its smallest ``p^alpha`` ``[]`` and its item count ``[]`` int64
SHARD_TOTAL = "total"
SHARD_MIN_LEAF = "min_leaf"
SHARD_SIZE = "size"
#: a shard's checkpoint as ``[L]`` uint8 bytes
SHARD_STATE = "state"
#: ``[]`` bool in a stop request: the shard's loop ends too
SHARD_EXIT = "exit"
#: how many of an update's priorities ``[]`` int64 the shard applied (the rest were stale)
PRIORITIES_APPLIED = "applied"

#: the scalar ``[]`` a learner backpropagates, in a loss's output (its other entries are statistics)
LOSS = "loss"
#: the TD errors ``[B]`` of a replayed batch, from Ape-X's loss (the new priorities)
TD_ERROR = "td_error"
#: the mean ``Q(s, a)`` ``[]`` of a replayed batch's actions, from Ape-X's loss
Q_MEAN = "q_mean"
#: an inserted transition's ``[K]`` frame indices of its observation and of its bootstrap observation
#: (Ape-X's frame replay: the frames are stored once, the stacks rebuilt at sampling)
OBS_FRAMES, NEXT_FRAMES = "obs_frames", "next_frames"
