// swift-tools-version: 6.1
// DeltaSnap benchmarks (ordo-one/benchmark). Run: `cd Benchmarks && swift package benchmark`.
import PackageDescription

let package = Package(
    name: "DeltaSnapBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        // Named, so the products below resolve whatever the checkout directory is called.
        .package(name: "DeltaSnap", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "DeltaSnapBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "DeltaSnapCore", package: "DeltaSnap"),
                .product(name: "DeltaSnapStore", package: "DeltaSnap"),
                .product(name: "DeltaSnapSQLiteStore", package: "DeltaSnap"),
                .product(name: "DeltaSnapClient", package: "DeltaSnap"),
                .product(name: "DeltaSnapServer", package: "DeltaSnap"),
                .product(name: "DeltaSnapSynthetic", package: "DeltaSnap"),
                .product(name: "DeltaSnapTrust", package: "DeltaSnap"),
            ],
            path: "Benchmarks/DeltaSnapBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
