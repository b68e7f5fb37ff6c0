/// Runs `body`, then `cleanup` whether it returned or threw: the async `defer` every fixture
/// needs (a server or a PostgreSQL store left running by a failing test keeps its port, or traps
/// when released with connections open).
///
/// ```swift
/// try await finally({ try await body(server) }, then: { await server.stop() })
/// ```
package func finally<T>(_ body: () async throws -> T, then cleanup: () async -> Void) async throws -> T {
    let result: T
    do {
        result = try await body()
    } catch {
        await cleanup()
        throw error
    }
    await cleanup()
    return result
}
