// A real OpenID Connect provider for the tests (panva's oidc-provider, OpenID-certified), on
// loopback. tests/support/oidc.py starts it with its settings as JSON in OIDC_TEST_CONFIG:
//   {port, client_id, client_secret, redirect_uris, accounts: {login: {email, name, groups}}}
// Its login and consent pages are the library's development interactions (any password is
// taken for a listed account): tests drive them with plain HTTP requests. PKCE is required.
// Prints "ready <issuer>" once it listens.
import Provider from "oidc-provider";

const config = JSON.parse(process.env.OIDC_TEST_CONFIG);
const issuer = `http://127.0.0.1:${config.port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: config.client_id,
      client_secret: config.client_secret,
      redirect_uris: config.redirect_uris,
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  pkce: { required: () => true },
  scopes: ["openid", "email", "profile", "groups"],
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["name"],
    groups: ["groups"],
  },
  // The scopes' claims go in the ID token itself (not only the userinfo endpoint).
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ["cairn-tests-only"] },
  async findAccount(_ctx, id) {
    const account = config.accounts[id];
    if (!account) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, email_verified: true, ...account };
      },
    };
  },
});
// Plain HTTP on loopback: the library allows it for a development issuer.
provider.proxy = false;

const server = provider.listen(config.port, "127.0.0.1", () => {
  console.log(`ready ${issuer}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
