"""Clocks: each one implementation of :class:`~.protocol.Clock` (:mod:`.protocol` says what a
clock is and what a new one looks like), picked for a device by :func:`~.choice.make_clock`;
the stamp sources they read are :mod:`.stamps`."""
