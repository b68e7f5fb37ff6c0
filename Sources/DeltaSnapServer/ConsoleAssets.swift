// Placeholder until clients/console/build.sh writes the console's files here.
enum ConsoleAssets {
    static let contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    static let html = "<!doctype html><title>DeltaSnap console</title>"
    static let script = ""
    static let style = ""
}
