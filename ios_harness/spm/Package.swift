// swift-tools-version:5.9
// Resolves ExecuTorch's prebuilt Apple frameworks so ios_harness/fetch_frameworks.sh
// can hand their .xcframework directories to CMake. Nothing here is built.
//
// Product names and the "swiftpm-<version>" branch scheme are from ExecuTorch's
// docs/source/using-executorch-ios.md and its swiftpm-branch Package.swift (read
// 2026-12-02). ExecuTorch's package needs iOS 17 / macOS 14 at least.
//
// ETDEPLOY_EXECUTORCH_BRANCH overrides the branch, e.g. a nightly
// "swiftpm-1.5.1.20261201"; it must match the executorch wheel that wrote the .pte.

import PackageDescription
import Foundation

let branch = ProcessInfo.processInfo.environment["ETDEPLOY_EXECUTORCH_BRANCH"] ?? "swiftpm-1.5.1"

let package = Package(
  name: "etdeploy-executorch-frameworks",
  platforms: [
    .iOS(.v17),
    .macOS(.v14),
  ],
  products: [
    .library(name: "etdeploy-executorch-frameworks", targets: ["Frameworks"]),
  ],
  dependencies: [
    .package(url: "https://github.com/pytorch/executorch.git", branch: branch),
  ],
  targets: [
    .target(
      name: "Frameworks",
      dependencies: [
        .product(name: "executorch", package: "executorch"),
        .product(name: "backend_xnnpack", package: "executorch"),
        .product(name: "backend_coreml", package: "executorch"),
        .product(name: "kernels_optimized", package: "executorch"),
        .product(name: "kernels_quantized", package: "executorch"),
      ],
      path: "Sources/Frameworks"
    ),
  ]
)
