"""nbcast's test plug-in: the ``md`` renderer and the ``teams`` channel, registered
through the ``nbcast.renderers`` and ``nbcast.channels`` entry point groups (see
``pyproject.toml``). nbcast imports them only when a definition names them."""
