import Foundation
import NIOCore
import NIOPosix
import PostgresNIO

/// One line saying why PostgreSQL refused or could not be reached — the server's message,
/// else what the connection met (refused, reset, a TLS failure), else the error's kind —
/// never postgres-nio's multi-line dump (`String(reflecting:)` of a `PSQLError`): a CLI says
/// it on one line, a log line stays one line.
///
/// ```swift
/// throw FollowError.source("cannot reach the source \(url): \(PostgresErrorReason.line(error))")
/// ```
package enum PostgresErrorReason {
    package static func line(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return line(underlying) }
            return error.code.description
        }
        // What a refused or reset connection met, as the system says it ("Connection refused").
        if let error = error as? NIOConnectionError, let last = error.connectionErrors.last { return line(last.error) }
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
        let text = String(describing: error)
        return text.split(whereSeparator: \.isNewline).first.map(String.init) ?? text
    }
}
