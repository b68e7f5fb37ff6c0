import DeltaSnapStore
import Foundation
import NIOSSL
import PostgresNIO

/// `postgres://user[:password]@host[:port]/database[?sslmode=MODE]` (or `postgresql://…`),
/// as every `--db` option accepts besides an SQLite path.
///
/// `sslmode` follows libpq: `prefer` (the default, as PostgresNIO's and libpq's own:
/// TLS when the server offers it, without checking its certificate), `disable`, `require`
/// (TLS or no connection, certificate unchecked) and `verify-full` (TLS with the
/// certificate checked against the system's roots and the host name).
package struct PostgresURL: Sendable, Equatable, CustomStringConvertible {
    package var user: String
    package var password: String?
    package var host: String
    package var port: Int
    package var database: String
    package var tlsMode: TLSMode

    /// How the connection uses TLS (`?sslmode=`).
    package enum TLSMode: String, Sendable, CaseIterable {
        case disable, prefer, require
        case verifyFull = "verify-full"
    }

    package init(_ text: String) throws(StoreError) {
        guard Self.isPostgresURL(text),
            let components = URLComponents(string: text), let host = components.host, !host.isEmpty
        else {
            throw .badLocation(text, "expected postgres://user@host:port/database")
        }
        guard let user = components.user, !user.isEmpty else { throw .badLocation(text, "no user name") }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else { throw .badLocation(text, "no database name") }
        var tlsMode = TLSMode.prefer
        for item in components.queryItems ?? [] {
            guard item.name == "sslmode", let value = item.value, let mode = TLSMode(rawValue: value) else {
                throw .badLocation(
                    Self.withoutPassword(text),
                    "unknown parameter \(item.name)=\(item.value ?? ""); the one accepted is sslmode=\(TLSMode.allCases.map(\.rawValue).joined(separator: "|"))")
            }
            tlsMode = mode
        }
        self.user = user.removingPercentEncoding ?? user
        password = components.password.map { $0.removingPercentEncoding ?? $0 }
        self.host = host
        port = components.port ?? 5432
        self.database = database
        self.tlsMode = tlsMode
    }

    /// Whether `text` names a PostgreSQL server (`postgres://`, `postgresql://`) rather than
    /// an SQLite file: the one rule `--db` is read by.
    package static func isPostgresURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// `url` (any text, valid or not) with any password between the user and `@` removed,
    /// for messages and logs.
    package static func withoutPassword(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else { return url }
        let authority = url[scheme.upperBound...].prefix { $0 != "/" && $0 != "?" }
        guard let at = authority.lastIndex(of: "@") else { return url }
        let userInfo = url[scheme.upperBound..<at]
        guard let colon = userInfo.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + String(url[at...])
    }

    /// The URL without its password, for messages.
    package var description: String { "postgres://\(user)@\(host):\(port)/\(database)" }

    package var configuration: PostgresConnection.Configuration {
        get throws {
            PostgresConnection.Configuration(host: host, port: port, username: user, password: password, database: database, tls: try tls)
        }
    }

    private var tls: PostgresConnection.Configuration.TLS {
        get throws {
            var configuration = TLSConfiguration.makeClientConfiguration()
            switch tlsMode {
            case .disable:
                return .disable
            case .prefer, .require:
                // As libpq's prefer/require: encrypted, but the certificate is not checked
                // (a server's default certificate is usually self-signed).
                configuration.certificateVerification = .none
                return tlsMode == .prefer ? .prefer(try NIOSSLContext(configuration: configuration)) : .require(try NIOSSLContext(configuration: configuration))
            case .verifyFull:
                return .require(try NIOSSLContext(configuration: configuration))
            }
        }
    }
}
