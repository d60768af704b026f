package api

import "github.com/gin-gonic/gin"

// Engine is the handler of every route (tests add routes to it).
func (s *Server) Engine() *gin.Engine { return s.engine }
