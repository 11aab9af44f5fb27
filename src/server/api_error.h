#pragma once
// An error the server answers with: its HTTP status and the OpenAI error object
// {"error": {"message", "type", "param", "code"}}. Request parsing and the handlers throw it; the
// routes turn it into the response (http_server.cpp), and every other exception into a 500.
#include <string>

#include "common/errors.h"

namespace es::server {

class ApiError : public Error {
 public:
  // param and code: empty for JSON null.
  ApiError(int status, std::string type, const std::string& message, std::string param = {},
           std::string code = {})
      : Error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};

// 400 invalid_request_error about request field `param`.
inline ApiError badRequest(const std::string& message, std::string param, std::string code = {}) {
  return ApiError(400, "invalid_request_error", message, std::move(param), std::move(code));
}

}  // namespace es::server
