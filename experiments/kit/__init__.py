"""What every benchmark measures with, written once: clocks and rates (:mod:`.measure`), distrl
runs and their summaries (:mod:`.runs`), TorchRL's collector layouts and the env-only limit
(:mod:`.torchrl_layouts`), CartPole's yardstick (:mod:`.yardstick`) and Pong's pieces
(:mod:`.pong`). The kit imports no script, so a script may import any of it without a circle."""
