"""The local stack runner: Envoy, Triton and the four services on loopback."""
