// SwiftPM needs one source file per target; this package exists only to resolve
// ExecuTorch's binary targets (see ../../Package.swift).
