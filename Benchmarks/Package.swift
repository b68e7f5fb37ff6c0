// swift-tools-version: 6.1
// DeltaSnap benchmarks (ordo-one/benchmark). Run: `cd Benchmarks && swift package benchmark`.
import PackageDescription

let package = Package(
    name: "DeltaSnapBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "DeltaSnapBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "DeltaSnapCore", package: "main"),
                .product(name: "DeltaSnapStore", package: "main"),
                .product(name: "DeltaSnapClient", package: "main"),
                .product(name: "DeltaSnapSynthetic", package: "main"),
            ],
            path: "Benchmarks/DeltaSnapBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
