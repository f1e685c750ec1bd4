"""One partition's verified shallow copy: fetchers, the in-order appender and its answer checks,
boundary agreement checks, the byte budget, the producer session and byte-rate throttles."""
