import Foundation

/// How long a connection may take, and how many the server holds: what keeps `serve` up on
/// the open internet (slow or vanished clients, idle keep-alive connections, floods).
///
/// The timeouts follow nginx's defaults and meaning: a request head must arrive within
/// ``headerTimeout`` (`client_header_timeout`); a body stalls at most ``bodyTimeout`` between
/// two reads the server asked for (`client_body_timeout`); a keep-alive connection with
/// nothing in flight is closed after ``idleTimeout`` (`keepalive_timeout`); a response the
/// client stops reading is given up after ``sendTimeout`` (`send_timeout`). A request the
/// server is still answering — a long-poll held by `GET /v1/index?wait=` — is never timed out.
///
/// ```swift
/// var configuration = DeltaSnapServerConfiguration()
/// configuration.connections = ConnectionLimits(descriptorLimit: 4096)
/// configuration.connections.idleTimeout = .seconds(30)
/// ```
public struct ConnectionLimits: Sendable, Equatable {
    public var headerTimeout: Duration = .seconds(60)
    public var bodyTimeout: Duration = .seconds(60)
    public var idleTimeout: Duration = .seconds(75)
    public var sendTimeout: Duration = .seconds(60)
    /// Connections held at once. At the cap an idle keep-alive connection is closed for a new
    /// one (oldest first); with none idle the new one is answered `503` with `Retry-After`.
    public var maximumConnections: Int
    /// Files a request may open for itself at once (a large blob's download): one more is
    /// answered `503` rather than take a descriptor the process needs.
    public var transferDescriptors: Int
    /// Read transactions the embedded store may open at once (3 descriptors each with WAL).
    public var storeReaders: Int
    /// The descriptor limit these were derived from (`nil`: set by hand).
    public var descriptorLimit: Int?
    /// The cap was given (`--max-connections`), not derived from the limit.
    public var capIsSetByHand = false

    /// Limits sized for a process allowed `descriptorLimit` open descriptors: room is kept
    /// for the store (``storeReaders``), for files opened per request
    /// (``transferDescriptors``) and for the runtime — stdio, epoll and event descriptors,
    /// log files, and libdispatch's own reads under `/proc`, which trap the process when
    /// they find no descriptor free. Whatever the clients do, connections never take those.
    public init(descriptorLimit: Int) {
        let limit = max(64, descriptorLimit)
        storeReaders = min(64, max(4, limit / 64))
        transferDescriptors = min(256, max(16, limit / 16))
        let reserve = Self.reserve(descriptorLimit: limit, storeReaders: storeReaders)
        maximumConnections = max(16, limit - reserve - transferDescriptors)
        self.descriptorLimit = limit
    }

    /// Limits with a cap set by hand (tests, an app mounting the server).
    public init(maximumConnections: Int, transferDescriptors: Int = 256, storeReaders: Int = 64) {
        self.maximumConnections = max(1, maximumConnections)
        self.transferDescriptors = max(1, transferDescriptors)
        self.storeReaders = max(1, storeReaders)
        descriptorLimit = nil
    }

    /// Limits for this process's current soft descriptor limit.
    public static func forThisProcess() -> ConnectionLimits {
        ConnectionLimits(descriptorLimit: currentDescriptorLimit())
    }

    /// Descriptors kept out of the connections' reach: the runtime's 64, the store's readers
    /// (database, WAL and shared-memory files each) and its writer, and room for the
    /// connections being refused at the cap (each is open until its `503` is written).
    static func reserve(descriptorLimit: Int, storeReaders: Int) -> Int {
        64 + 3 * storeReaders + 16 + shedAllowance(descriptorLimit: descriptorLimit)
    }

    /// Connections past the cap that may be open at once while they are answered `503`;
    /// past it the server stops accepting until some close (the kernel's backlog holds them).
    static func shedAllowance(descriptorLimit: Int) -> Int {
        min(256, max(16, descriptorLimit / 32))
    }

    /// The process's soft limit on open descriptors.
    public static func currentDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        return limit.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    /// Connections open at most, counting those being refused at the cap: past it the server
    /// stops accepting for a moment rather than take descriptors it keeps.
    public var acceptingAtMost: Int {
        maximumConnections + Self.shedAllowance(descriptorLimit: descriptorLimit ?? maximumConnections)
    }

    /// One line for the operator: the cap and where it comes from.
    public var summary: String {
        var line = "connections: at most \(maximumConnections)"
        if capIsSetByHand || descriptorLimit == nil {
            line += " (set by --max-connections" + (descriptorLimit.map { "; open-file limit \($0)" } ?? "") + ")"
        } else if let descriptorLimit {
            line += " (open-file limit \(descriptorLimit), of which \(descriptorLimit - maximumConnections) kept for the store, per-request files and the runtime)"
        }
        return line + "; timeouts: head \(Self.seconds(headerTimeout)), body \(Self.seconds(bodyTimeout)), idle \(Self.seconds(idleTimeout)), send \(Self.seconds(sendTimeout))"
    }

    private static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        return attoseconds == 0 ? "\(seconds) s" : "\(Double(seconds) + Double(attoseconds) / 1e18) s"
    }
}
