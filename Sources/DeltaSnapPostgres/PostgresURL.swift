import PostgresNIO

/// `postgres://user[:password]@host[:port]/database` (or `postgresql://…`), as every `--db`
/// option accepts besides an SQLite path.
public struct PostgresURL: Sendable, Equatable, CustomStringConvertible {
    public var user: String
    public var password: String?
    public var host: String
    public var port: Int
    public var database: String

    /// Whether `text` names a PostgreSQL server rather than an SQLite file.
    public static func matches(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    public init(_ text: String) throws(PostgresStoreError) {
        guard Self.matches(text), let components = URLComponents(string: text), let host = components.host, !host.isEmpty else {
            throw .badURL(text, "expected postgres://user@host:port/database")
        }
        guard let user = components.user, !user.isEmpty else { throw .badURL(text, "no user name") }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else { throw .badURL(text, "no database name") }
        self.user = user.removingPercentEncoding ?? user
        password = components.password.map { $0.removingPercentEncoding ?? $0 }
        self.host = host
        port = components.port ?? 5432
        self.database = database
    }

    /// The URL without its password, for messages.
    public var description: String { "postgres://\(user)@\(host):\(port)/\(database)" }

    var configuration: PostgresConnection.Configuration {
        PostgresConnection.Configuration(host: host, port: port, username: user, password: password, database: database, tls: .disable)
    }
}

import Foundation
