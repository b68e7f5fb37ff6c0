// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "DeltaSnap",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "DeltaSnapCore", targets: ["DeltaSnapCore"]),
        .library(name: "DeltaSnapStore", targets: ["DeltaSnapStore"]),
        .library(name: "DeltaSnapSQLiteStore", targets: ["DeltaSnapSQLiteStore"]),
        .library(name: "DeltaSnapPostgresStore", targets: ["DeltaSnapPostgresStore"]),
        .library(name: "DeltaSnapStoreLocation", targets: ["DeltaSnapStoreLocation"]),
        .library(name: "DeltaSnapServer", targets: ["DeltaSnapServer"]),
        .library(name: "DeltaSnapClient", targets: ["DeltaSnapClient"]),
        .library(name: "DeltaSnapSynthetic", targets: ["DeltaSnapSynthetic"]),
        .library(name: "DeltaSnapTrust", targets: ["DeltaSnapTrust"]),
        .executable(name: "deltasnap", targets: ["deltasnap"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // Already in the graph through Hummingbird; named for NIOTooManyBytesError.
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        // Already in the graph through swift-nio; named for HeapModule (the long-polls'
        // deadlines, the import's merge of sorted runs).
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.1.0"),
        // In the graph through postgres-nio; named for TLS to PostgreSQL (`?sslmode=`).
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // Also in the graph through Hummingbird; named for the HTTP part types of a channel handler.
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        // Per-user tokens for two-way sync: HS256, EdDSA and ES256 JWTs.
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        // Identity providers' key sets (`serve --jwks-url`): fetched with the maintained NIO
        // client for its connect/read timeouts and streamed body (size-capped); URLSession on
        // Linux has neither a response-size limit nor NIO's event loops the server runs on.
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Operators' metrics: swift-metrics handles, exported at /metrics by swift-prometheus.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // The store on PostgreSQL (scale-out): the maintained client, no hand-written wire protocol.
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // Already in the graph through Hummingbird; named to shut the server down gracefully
        // when its task is cancelled (see DeltaSnapServer.run).
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        // The access rules file (`serve --rules FILE`): YAML, read by the maintained parser.
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
    ],
    targets: [
        // System libraries. Both are Debian -dev packages; `make` installs them when missing.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // The protocol: canonical JSON, records, tokens, checksums, the body format, gzip.
        // Foundation + zlib only, so every other target can use it (its public part: the values
        // the client and server APIs hand over; the codecs are `package`).
        .target(name: "DeltaSnapCore", dependencies: ["CZlib"]),
        // Signed data: the LtHash16 state digest, Ed25519 keys, the signed index.
        .target(
            name: "DeltaSnapTrust",
            dependencies: [
                "DeltaSnapCore", .product(name: "Crypto", package: "swift-crypto"),
                // Raw ChaCha20 for the state digest; already built for jwt-kit's RSA.
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ]
        ),
        // A thin, fast sqlite3 layer shared by the store and the client replica.
        .target(name: "DeltaSnapSQLite", dependencies: ["CSQLite"]),
        // The server-side source of truth, whatever holds it: the CollectionStore protocol and
        // what works on any store (push planning, import parsing, export, bake, compaction
        // policy, errors). Links no database.
        .target(
            name: "DeltaSnapStore",
            dependencies: [
                "DeltaSnapCore", "DeltaSnapTrust", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HeapModule", package: "swift-collections"),
            ]
        ),
        // The embedded default store: one SQLite file (versions, import, push, compaction;
        // blocking work on queues of its own).
        .target(name: "DeltaSnapSQLiteStore", dependencies: ["DeltaSnapCore", "DeltaSnapSQLite", "DeltaSnapStore", "DeltaSnapTrust"]),
        // The HTTP server (Hummingbird) on any CollectionStore. Mountable in a user's own
        // Hummingbird app; links no database client of its own.
        .target(
            name: "DeltaSnapServer",
            dependencies: [
                "DeltaSnapCore", "DeltaSnapStore", "DeltaSnapTrust",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        // The same store on a PostgreSQL server, behind every `--db postgres://…`.
        .target(
            name: "DeltaSnapPostgresStore",
            dependencies: [
                "DeltaSnapCore", "DeltaSnapStore", "DeltaSnapTrust",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // `deltasnap follow`: a PostgreSQL database's tables published change by change
        // (logical decoding with pgoutput), into any store.
        .target(
            name: "DeltaSnapFollow",
            dependencies: [
                "DeltaSnapCore", "DeltaSnapStore", "DeltaSnapPostgresStore", "DeltaSnapSQLite",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // Where `--db` points, and opening the store there: the one place that knows every
        // kind of store (SQLite or PostgreSQL).
        .target(
            name: "DeltaSnapStoreLocation",
            dependencies: ["DeltaSnapStore", "DeltaSnapSQLiteStore", "DeltaSnapPostgresStore", .product(name: "Logging", package: "swift-log")]
        ),
        // What an app links: Foundation, SQLite and swift-crypto (CryptoKit on Apple platforms)
        // only (no NIO, no Hummingbird), so it builds for iOS.
        .target(name: "DeltaSnapClient", dependencies: ["DeltaSnapCore", "DeltaSnapSQLite", "DeltaSnapTrust", "CFileClone"]),
        // FICLONE for the client's first copy of a bundled replica (Swift cannot call ioctl(2)).
        .target(name: "CFileClone"),
        // Seeded synthetic records for tests, benchmarks and `deltasnap generate`.
        .target(name: "DeltaSnapSynthetic", dependencies: ["DeltaSnapCore"]),
        .executableTarget(
            name: "deltasnap",
            dependencies: [
                "DeltaSnapCore", "DeltaSnapStore", "DeltaSnapSQLiteStore", "DeltaSnapStoreLocation", "DeltaSnapServer", "DeltaSnapClient", "DeltaSnapSynthetic",
                "DeltaSnapTrust", "DeltaSnapFollow", "DeltaSnapPostgresStore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        .target(
            name: "DeltaSnapTestSupport",
            dependencies: [
                "DeltaSnapCore", "DeltaSnapStore", "DeltaSnapSQLiteStore", "DeltaSnapStoreLocation", "DeltaSnapSynthetic", "DeltaSnapServer", "DeltaSnapTrust",
                "DeltaSnapClient",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/DeltaSnapTestSupport"
        ),
        .testTarget(name: "DeltaSnapCoreTests", dependencies: ["DeltaSnapCore", "DeltaSnapSynthetic"]),
        .testTarget(name: "DeltaSnapTrustTests", dependencies: ["DeltaSnapTrust", "DeltaSnapSynthetic"]),
        .testTarget(
            name: "DeltaSnapFollowTests",
            dependencies: [
                "DeltaSnapFollow", "DeltaSnapCore", "DeltaSnapPostgresStore", "DeltaSnapStore", "DeltaSnapStoreLocation", "DeltaSnapTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(name: "DeltaSnapPostgresTests", dependencies: ["DeltaSnapPostgresStore", "DeltaSnapStore", "DeltaSnapStoreLocation", "DeltaSnapTestSupport"]),
        .testTarget(name: "DeltaSnapStoreTests", dependencies: ["DeltaSnapPostgresStore", "DeltaSnapStore", "DeltaSnapSQLite", "DeltaSnapSQLiteStore", "DeltaSnapStoreLocation", "DeltaSnapTestSupport", "DeltaSnapTrust"]),
        .testTarget(
            name: "DeltaSnapServerTests",
            dependencies: [
                "DeltaSnapServer", "DeltaSnapClient", "DeltaSnapSQLiteStore", "DeltaSnapTestSupport",
                .product(name: "JWTKit", package: "jwt-kit"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "Hummingbird", package: "hummingbird"),
                // Router-level tests (`app.test(.router)`): no socket where none is needed.
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
        // The `deltasnap` verbs as a user runs them: child processes, real files, exit codes.
        .testTarget(
            name: "DeltaSnapCLITests",
            dependencies: [
                "DeltaSnapClient", "DeltaSnapCore", "DeltaSnapServer", "DeltaSnapSQLite", "DeltaSnapSQLiteStore", "DeltaSnapStore", "DeltaSnapTestSupport",
                "DeltaSnapTrust",
            ]
        ),
        .testTarget(
            name: "DeltaSnapClientTests",
            dependencies: ["DeltaSnapClient", "DeltaSnapServer", "DeltaSnapSQLite", "DeltaSnapSQLiteStore", "DeltaSnapTestSupport", "DeltaSnapTrust"]
        ),
    ]
)

// The ordo-one benchmarks (`make bench`) join the package only when asked for
// (`DELTASNAP_BENCHMARKS=1`): they measure DeltaSnap's own internals — `package` declarations,
// which a package of their own could not reach — and an app that depends on DeltaSnap should
// resolve neither ordo-one/benchmark nor its malloc interposer.
if Context.environment["DELTASNAP_BENCHMARKS"] != nil {
    package.dependencies.append(.package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]))
    package.targets.append(
        .executableTarget(
            name: "DeltaSnapBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                "DeltaSnapCore", "DeltaSnapStore", "DeltaSnapSQLiteStore", "DeltaSnapClient", "DeltaSnapServer", "DeltaSnapSynthetic", "DeltaSnapTrust",
            ],
            // The benchmark plugin runs the executables in a `Benchmarks` directory.
            path: "Benchmarks/DeltaSnapBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ))
}
