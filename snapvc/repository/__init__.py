"""The repository layer: commits of agent state on branches and what is read from them
(``core``), per-path history (``history``), and the narrow role the layers above it
use instead of the whole repository (``roles``)."""
