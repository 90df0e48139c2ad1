"""One judge per program family, each reporting through findings.Judge."""
